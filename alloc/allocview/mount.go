//go:build !capalloc_nomount

package allocview

import (
	"expvar"
	"net/http"
)

// The side effects of importing the package, as net/http/pprof's: the
// views on http.DefaultServeMux and the "capalloc" expvar. Building with
// -tags capalloc_nomount leaves both out (the package doc says when to).
func init() {
	http.Handle(Prefix, Handler())
	expvar.Publish("capalloc", expvar.Func(Vars))
}
