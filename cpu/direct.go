package cpu

import "github.com/capalloc/capalloc/alloc"

// DirectSpan returns the bytes behind device range [p, p+n), for a caller
// that copies them itself (the plugin server, whose engine maps device
// memory supplied as shared memory). It is a synchronizing call exactly
// like CopyHtoD and CopyDtoH, with their rules and errors: refused on a
// capturing stream (ErrCaptureIllegalOp, invalidating the capture), it runs
// everything queued on s before it and reports that work's failure, then
// checks the range (ErrInvalidValue). Work queued on s after it returns
// sees what the caller wrote into the span before queueing it.
func (d *Driver) DirectSpan(p alloc.DevicePtr, n int64, h alloc.Stream) ([]byte, error) {
	const what = "direct access"
	if d.closed.Load() {
		return nil, errClosed(what)
	}
	if err := d.wait(h, what, copyInteraction); err != nil {
		return nil, err
	}
	r, off, why := d.resolve(p, n)
	if why != "" {
		return nil, errf(alloc.ErrInvalidValue, "%s %#x+%d: %s", what, uint64(p), n, why)
	}
	return r.span(off, n, what)
}
