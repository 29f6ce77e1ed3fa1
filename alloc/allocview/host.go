package allocview

import (
	"net"
	"net/http"
	"net/url"
)

// profileURL is the profile's address in the index's suggested
// `go tool pprof` command. The Host header is the client's to choose, so it
// is used only when it names the address the request arrived on
// (http.LocalAddrContextKey) or a loopback one; otherwise that local
// address is, and without one the path alone.
func profileURL(r *http.Request) string {
	u := url.URL{Scheme: "http", Path: r.URL.Path + "profile"}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	switch {
	case loopback(r.Host) || local != nil && sameAddr(r.Host, local.String()):
		u.Host = r.Host
	case local != nil:
		u.Host = local.String()
	default:
		return u.Path
	}
	return u.String()
}

// loopback reports whether host[:port] names this machine's loopback.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameAddr reports whether two host:port strings name the same IP and port.
func sameAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	ai, bi := net.ParseIP(ah), net.ParseIP(bh)
	return ai != nil && bi != nil && ai.Equal(bi)
}
