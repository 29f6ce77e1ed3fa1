package hip

import (
	"maps"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// checkStream refuses a handle this driver did not create (or destroyed)
// before it reaches HIP, where a stale hipStream_t is undefined behavior.
func (d *Driver) checkStream(op string, s alloc.Stream) error {
	if d.closed.Load() {
		return errClosed(op)
	}
	if !(*d.streams.Load())[s] {
		return errf(alloc.ErrInvalidValue, "%s: unknown or destroyed stream %#x", op, uint64(s))
	}
	return nil
}

// streamFlags is hipStreamNonBlocking unless Options.Blocking asks for a
// stream that synchronizes with the legacy default stream.
func (o Options) streamFlags() uintptr {
	if o.Blocking {
		return 0
	}
	return streamNonBlocking
}

// CreateStream makes a stream on the driver's device, with the configured
// priority and blocking flag. It runs on the dev thread: a stream belongs
// to the device current when it is created.
func (d *Driver) CreateStream() (alloc.Stream, error) {
	const op = "create stream"
	if d.closed.Load() {
		return 0, errClosed(op)
	}
	flags := d.opts.streamFlags()
	var s uintptr
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "hipStreamCreateWithPriority",
			call(d.rt.streamCreateWithPriority, uintptr(unsafe.Pointer(&s)), flags, uintptr(d.opts.StreamPriority)))
	})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	m := maps.Clone(*d.streams.Load())
	m[alloc.Stream(s)] = true
	d.streams.Store(&m)
	d.mu.Unlock()
	return alloc.Stream(s), nil
}

// DestroyStream releases s; HIP lets work already queued on it finish.
func (d *Driver) DestroyStream(s alloc.Stream) error {
	const op = "destroy stream"
	d.mu.Lock()
	if err := d.checkStream(op, s); err != nil {
		d.mu.Unlock()
		return err
	}
	m := maps.Clone(*d.streams.Load())
	delete(m, s)
	d.streams.Store(&m)
	d.mu.Unlock()
	return d.rt.check(op, "hipStreamDestroy", call(d.rt.streamDestroy, uintptr(s)))
}

func (d *Driver) StreamSynchronize(s alloc.Stream) error {
	const op = "stream synchronize"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.rt.check(op, "hipStreamSynchronize", call(d.rt.streamSynchronize, uintptr(s))); err != nil {
		return err
	}
	return d.takeHostFuncErr(s)
}

// StreamQuery maps hipErrorNotReady to (false, nil).
func (d *Driver) StreamQuery(s alloc.Stream) (bool, error) {
	const op = "stream query"
	if err := d.checkStream(op, s); err != nil {
		return false, err
	}
	switch code, _ := callHot(d.rt.streamQuery, uintptr(s)); code {
	case 0:
		return true, nil
	case errNotReady:
		return false, nil
	default:
		return false, d.rt.fail(op, "hipStreamQuery", code)
	}
}

// StreamCaptureStatus asks hipStreamIsCapturing, legal at any time.
func (d *Driver) StreamCaptureStatus(s alloc.Stream) (alloc.DriverCaptureStatus, error) {
	const op = "stream capture status"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	code, st := callHot(d.rt.streamIsCapturing, uintptr(s), outArg)
	if err := d.rt.check(op, "hipStreamIsCapturing", code); err != nil {
		return 0, err
	}
	return captureStatus(int32(st)) // hipStreamCaptureStatus is a C enum (int)
}

func captureStatus(st int32) (alloc.DriverCaptureStatus, error) {
	switch st {
	case captureStatusNone:
		return alloc.DriverCaptureNone, nil
	case captureStatusActive:
		return alloc.DriverCaptureActive, nil
	case captureStatusInvalidated:
		return alloc.DriverCaptureInvalidated, nil
	}
	return 0, errf(alloc.ErrDriver, "hipStreamIsCapturing reported unknown status %d", st)
}
