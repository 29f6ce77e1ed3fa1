// Package allocview serves capalloc's device memory over HTTP, the way
// net/http/pprof serves the Go runtime's: importing it mounts Handler at
// /debug/capalloc/ on http.DefaultServeMux and publishes every open
// allocator's counters as the expvar "capalloc" (at /debug/vars).
//
//	import _ "github.com/capalloc/capalloc/alloc/allocview"
//	go http.ListenAndServe("localhost:6060", nil)
//
// Then, for every open allocator (alloc.Allocators):
//
//	/debug/capalloc/                      index: counters and segment map per allocator
//	/debug/capalloc/segments.svg          segment map: each segment a bar, blocks coloured by state, graphs with their bytes
//	/debug/capalloc/profile               pprof device memory profile: go tool pprof http://localhost:6060/debug/capalloc/profile
//	/debug/capalloc/snapshot.json         alloc.Snapshot as JSON
//
// Every view takes ?allocator=NAME for one allocator; without it the
// segment map and the snapshot cover every allocator (snapshot.json is
// then an array) and the profile is the process's (alloc.WriteProfile).
// An unknown name is a 404 whose body lists the open allocators.
//
// The profile is recorded only while alloc.SetProfileRate has turned
// recording on. Requested while it is off, it is still a 200 with a valid
// profile that go tool pprof opens: empty (or holding what was sampled
// before it was turned off), with a comment saying how to turn it on, and
// the response header X-Capalloc-Profile-Rate: 0.
//
// To mount it elsewhere, use Handler: it serves the views relative to
// wherever it is mounted (mux.Handle("/mem/", allocview.Handler())).
package allocview

import (
	"expvar"
	"net/http"
)

// Prefix is where importing the package mounts Handler on
// http.DefaultServeMux.
const Prefix = "/debug/capalloc/"

func init() {
	http.Handle(Prefix, Handler())
	expvar.Publish("capalloc", expvar.Func(Vars))
}
