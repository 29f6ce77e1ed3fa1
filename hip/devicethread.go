package hip

// OnDevice runs fn on the driver's device thread: a locked OS thread on
// which the driver's device is current (see thread.go). It is for
// libraries bound next to the runtime whose calls act on "the current
// device" of the calling thread, such as RCCL's ncclCommInitRank (package
// nccl's DeviceRunner). fn runs after the device calls queued before it
// and blocks those queued after it, so it must not wait on this driver's
// own calls. Calls fn makes are not guarded: a device-wide call belongs
// under alloc.DeviceWide. op names the caller in errors; after Close it
// fails with alloc.ErrClosed.
func (d *Driver) OnDevice(op string, fn func() error) error {
	if d.closed.Load() {
		return errClosed(op)
	}
	return d.dev.do(op, fn)
}
