// Package allocview serves capalloc's device memory over HTTP, the way
// net/http/pprof serves the Go runtime's: importing it mounts Handler at
// /debug/capalloc/ on http.DefaultServeMux and publishes every open
// allocator's counters as the expvar "capalloc" (at /debug/vars).
//
//	import _ "github.com/capalloc/capalloc/alloc/allocview"
//	go http.ListenAndServe("localhost:6060", nil)
//
// Then, for every open allocator of the process:
//
//	/debug/capalloc/                      index: counters and segment map per allocator
//	/debug/capalloc/segments.svg          segment map: each segment a bar as long as its size says, blocks coloured by state, tooltips, graphs with their bytes
//	/debug/capalloc/profile               pprof device memory profile: go tool pprof http://localhost:6060/debug/capalloc/profile
//	/debug/capalloc/snapshot.json         memmap.Snapshot as JSON
//	/debug/capalloc/summary.txt           memory summary as text (alloc.Allocator.Summary)
//	/debug/capalloc/history.json          memmap.History as JSON (alloc.Options.History)
//	/debug/capalloc/timeline              bytes in use over the history's events, stacked by call site
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
//
// Security: like net/http/pprof, these pages belong on a private
// listener (localhost, or an interface only operators reach), never on
// the engine's public one. They show device addresses, allocator and
// workspace names and, in the profile, the engine's source paths; the
// expvar import adds /debug/vars, whose "cmdline" is the process's
// arguments. An engine that serves http.DefaultServeMux to the public
// exposes them all by importing this package: serve the public listener
// from its own mux, or build with -tags capalloc_nomount, which leaves
// DefaultServeMux and expvar alone (mount Handler yourself, on a private
// mux). A request's cost to the engine is bounded: snapshots are cached
// for a second and taken one at a time (at most one walk of an
// allocator's blocks under its lock per second, however many clients
// poll), and snapshot.json lists at most DefaultMaxBlocks blocks
// (?max_blocks=N for more; the X-Capalloc-Blocks header says "listed of
// total"); history.json and the timeline read the newest
// DefaultMaxEvents events of each history (?max_events=N, at most
// MaxEvents; Truncated counts the older ones left out), copied one
// history at a time. docs/security.md.
package allocview

// Prefix is where importing the package mounts Handler on
// http.DefaultServeMux (unless built with -tags capalloc_nomount).
const Prefix = "/debug/capalloc/"
