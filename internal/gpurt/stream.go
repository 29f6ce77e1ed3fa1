package gpurt

import (
	"maps"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// checkStream refuses a handle this driver did not create (or destroyed)
// before it reaches the runtime, where a stale stream handle is undefined
// behavior.
func (d *Driver) checkStream(op string, s driver.Stream) error {
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	if !(*d.streams.Load())[s] {
		return d.v.Errf(driver.ErrInvalidValue, "%s: unknown or destroyed stream %#x", op, uint64(s))
	}
	return nil
}

// CreateStream makes a stream on the driver's device, with the configured
// priority and blocking flag. It runs on the dev thread: a stream belongs
// to the device current when it is created.
func (d *Driver) CreateStream() (driver.Stream, error) {
	const op = "create stream"
	if d.closed.Load() {
		return 0, d.v.ErrClosed(op)
	}
	flags := d.streamFlags()
	var s uintptr
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.StreamCreateWithPriority.Name,
			Call(d.rt.StreamCreateWithPriority.Addr, uintptr(unsafe.Pointer(&s)), flags, uintptr(d.opts.StreamPriority)))
	})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	m := maps.Clone(*d.streams.Load())
	m[driver.Stream(s)] = true
	d.streams.Store(&m)
	d.mu.Unlock()
	return driver.Stream(s), nil
}

// DestroyStream releases s; the runtime lets work already queued on it
// finish.
func (d *Driver) DestroyStream(s driver.Stream) error {
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
	return d.rt.Check(op, d.rt.StreamDestroy.Name, Call(d.rt.StreamDestroy.Addr, uintptr(s)))
}

// StreamSynchronize waits for s and reports the failure of its work,
// a host function's included.
func (d *Driver) StreamSynchronize(s driver.Stream) error {
	const op = "stream synchronize"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.rt.Check(op, d.rt.StreamSynchronize.Name, Call(d.rt.StreamSynchronize.Addr, uintptr(s))); err != nil {
		return err
	}
	return d.takeHostFuncErr(s)
}

// StreamQuery maps the not-ready code to (false, nil).
func (d *Driver) StreamQuery(s driver.Stream) (bool, error) { return d.query(s, false) }

// StreamIdle is driver.StreamIdler: the stream query, which neither waits
// nor runs anything. Success is idle, and then the error is the failure of
// a host function already run on s, as StreamSynchronize would report it
// (and clear it); the not-ready code is (false, nil); any other code is
// its typed error. Same capture rules as StreamQuery: alloc asks it only
// where a query is allowed.
func (d *Driver) StreamIdle(s driver.Stream) (bool, error) { return d.query(s, true) }

// query is the stream query; hostErr takes s's host function failure when
// it is done.
func (d *Driver) query(s driver.Stream, hostErr bool) (bool, error) {
	const op = "stream query"
	if err := d.checkStream(op, s); err != nil {
		return false, err
	}
	switch code, _ := CallHot(d.rt.StreamQuery.Addr, uintptr(s)); code {
	case 0:
		if hostErr {
			return true, d.takeHostFuncErr(s)
		}
		return true, nil
	case CodeNotReady:
		return false, nil
	default:
		return false, d.rt.Fail(op, d.rt.StreamQuery.Name, code)
	}
}

// StreamCaptureStatus asks the stream is-capturing call, legal at any time.
func (d *Driver) StreamCaptureStatus(s driver.Stream) (driver.CaptureStatus, error) {
	const op = "stream capture status"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	code, st := CallHot(d.rt.StreamIsCapturing.Addr, uintptr(s), OutArg)
	if err := d.rt.Check(op, d.rt.StreamIsCapturing.Name, code); err != nil {
		return 0, err
	}
	return d.v.CaptureStatus(int32(st), d.rt.StreamIsCapturing.Name) // the status is a C enum (int)
}

// CaptureStatus maps the runtime's stream capture status; call names the
// call that reported it.
func (v *Vendor) CaptureStatus(st int32, call string) (driver.CaptureStatus, error) {
	switch st {
	case CaptureStatusNone:
		return driver.CaptureNone, nil
	case CaptureStatusActive:
		return driver.CaptureActive, nil
	case CaptureStatusInvalidated:
		return driver.CaptureInvalidated, nil
	}
	return 0, v.Errf(driver.ErrDriver, "%s reported unknown status %d", call, st)
}
