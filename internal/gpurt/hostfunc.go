package gpurt

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Host functions (cudaLaunchHostFunc, hipLaunchHostFunc: (stream, fn,
// void *userData) with fn a void (*)(void *userData)). The runtime calls
// one C function pointer with a void *userData; purego makes Go callbacks
// into C function pointers, but each costs memory that is never freed and
// their number is bounded, so there is ONE trampoline for the process
// (both runtimes), made on first use, and userData is a key into
// hostFuncs. A function launched on a capturing stream becomes a host node
// that runs at every launch of the graph: its entry is kept for the life
// of the driver; any other is dropped once it has run.
//
// The runtime runs host functions on a thread of its own; a Go function
// must not call the driver (both runtimes forbid runtime calls there) and
// its error is kept for the stream's next StreamSynchronize, which reports
// it, as a failed kernel would be.

var (
	trampolineOnce sync.Once
	trampoline     uintptr
	hostFuncs      sync.Map // uintptr key → *hostFunc
	hostFuncKeys   atomic.Uintptr
)

type hostFunc struct {
	d    *Driver
	s    driver.Stream
	fn   func() error
	keep bool // a graph's host node: runs at every launch
}

// runHostFunc is the trampoline's Go side.
func runHostFunc(key uintptr) {
	v, ok := hostFuncs.Load(key)
	if !ok {
		return
	}
	h := v.(*hostFunc)
	if !h.keep {
		hostFuncs.Delete(key)
	}
	if err := h.fn(); err != nil {
		h.d.hostFuncFailed(h.s, err)
	}
}

// LaunchHostFunc is the runtime's host function launch: fn runs once the
// work queued on s before it is done (on a runtime thread), and at every
// launch of a graph that captured it. On a library without the (optional)
// symbol it fails with driver.ErrDriver, saying so.
func (d *Driver) LaunchHostFunc(s driver.Stream, fn func() error) error {
	const op = "launch host function"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if fn == nil {
		return d.v.Errf(driver.ErrInvalidValue, "%s: nil function", op)
	}
	if d.rt.LaunchHostFunc.Addr == 0 {
		return d.v.Errf(driver.ErrDriver, "%s: %s does not export %s%s", op, d.rt.Path, d.rt.LaunchHostFunc.Name, d.v.MissingHostFuncNote)
	}
	st, err := d.StreamCaptureStatus(s)
	if err != nil {
		return err
	}
	trampolineOnce.Do(func() { trampoline = purego.NewCallback(runHostFunc) })
	key := hostFuncKeys.Add(1)
	hostFuncs.Store(key, &hostFunc{d: d, s: s, fn: fn, keep: st != driver.CaptureNone})
	if err := d.rt.Check(op, d.rt.LaunchHostFunc.Name, Call(d.rt.LaunchHostFunc.Addr, uintptr(s), trampoline, key)); err != nil {
		hostFuncs.Delete(key)
		return err
	}
	return nil
}

// hostFuncFailed keeps the first failure of a host function on s for the
// stream's next synchronize.
func (d *Driver) hostFuncFailed(s driver.Stream, err error) {
	d.hostErrMu.Lock()
	defer d.hostErrMu.Unlock()
	if d.hostErrs == nil {
		d.hostErrs = map[driver.Stream]error{}
	}
	if d.hostErrs[s] == nil {
		d.hostErrs[s] = fmt.Errorf("host function on stream %#x: %w", uint64(s), err)
	}
}

// takeHostFuncErr returns and forgets s's host function failure.
func (d *Driver) takeHostFuncErr(s driver.Stream) error {
	d.hostErrMu.Lock()
	defer d.hostErrMu.Unlock()
	err := d.hostErrs[s]
	delete(d.hostErrs, s)
	return err
}

// dropHostFuncs forgets the kept host functions of d (Close).
func (d *Driver) dropHostFuncs() {
	hostFuncs.Range(func(k, v any) bool {
		if v.(*hostFunc).d == d {
			hostFuncs.Delete(k)
		}
		return true
	})
}
