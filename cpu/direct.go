package cpu

import (
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// DirectSpan returns the bytes behind device range [p, p+n), for a caller
// that copies them itself (the plugin server, whose engine maps device
// memory supplied as shared memory). It is a synchronizing call exactly
// like CopyHtoD and CopyDtoH, with their rules and errors: refused on a
// capturing stream (ErrCaptureIllegalOp, invalidating the capture), it runs
// everything queued on s before it and reports that work's failure, then
// checks the range (ErrInvalidValue). The stream stays at this point of
// its order until the caller calls release (exactly once, after its copy):
// work queued on s meanwhile, by any goroutine, runs after the copy and
// sees what the caller wrote, never during it (a blocking copy runs at its
// place in stream order). A span in a reservation also stays mapped until
// release: UnmapMemory and ReleaseAddress wait for it, so the caller must
// not call them, nor touch other reserved memory, before it releases.
func (d *Driver) DirectSpan(p driver.DevicePtr, n int64, h driver.Stream) (span []byte, release func(), err error) {
	const what = "direct access"
	unhold, err := d.hold(h, what, copyInteraction)
	if err != nil {
		return nil, nil, err
	}
	r, off, why := d.resolve(p, n)
	if why != "" {
		unhold()
		return nil, nil, errf(driver.ErrInvalidValue, "%s %#x+%d: %s", what, uint64(p), n, why)
	}
	unlock := d.lockVM(r, nil)
	if span, err = r.span(off, n, what); err != nil {
		unlock()
		unhold()
		return nil, nil, err
	}
	var once sync.Once
	return span, func() { once.Do(func() { unlock(); unhold() }) }, nil
}
