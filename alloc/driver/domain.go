package driver

import "github.com/capalloc/capalloc/internal/allochooks"

// DeviceWide runs fn, a device-wide unsafe driver call that belongs to no
// allocator, under the guard of the capture domain named domain (a
// Driver's CaptureDomain). It is for driver packages and code that holds a
// driver: opening a device (setting it current, reading its memory,
// creating a pool), tearing one down, trimming device memory, exchanging
// IPC memory handles.
//
// If a Global-mode capture is active in the domain, fn is not called and
// the error wraps ErrCaptureIllegalOp, names op and says why: the capture
// stays valid, and the caller can retry once it has ended. Otherwise fn
// runs holding the read side of the domain's gate, so no capture can begin
// until it returns (capture begin waits for it, up to its allocator's
// watchdog), and fn's error is returned as is.
//
// ThreadLocal and Relaxed captures do not refuse fn: they forbid unsafe
// calls only on the capturing thread, and a driver makes device-wide calls
// on a thread of its own.
//
// The capture domains are package alloc's (allochooks.Domains, installed
// by its init): in a program without it no capture can be active, and fn
// runs at once.
func DeviceWide(domain, op string, fn func() error) error {
	if allochooks.Domains == nil {
		return fn()
	}
	return allochooks.Domains.DeviceWide(domain, op, fn)
}

// AfterGlobalCaptures runs fn under the guard of the capture domain named
// domain as soon as no Global-mode capture is active in it: at once, in
// the caller's goroutine, if none is (and then it reports true), otherwise
// in a goroutine of its own when the last Global-mode capture in the
// domain ends (false). fn holds the gate's read side like DeviceWide's
// function: no capture begins while it runs. It is for work that must
// happen and must not invalidate a capture, such as a driver's teardown at
// Close. In a program without package alloc fn runs at once.
func AfterGlobalCaptures(domain string, fn func()) (ranNow bool) {
	if allochooks.Domains == nil {
		fn()
		return true
	}
	return allochooks.Domains.AfterGlobalCaptures(domain, fn)
}
