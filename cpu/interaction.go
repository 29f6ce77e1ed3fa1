package cpu

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

// WithInteractionMode returns d as seen by a caller whose capture
// interaction mode is m, the emulation of a thread that called
// cudaThreadExchangeStreamCaptureMode. The plain Driver calls as a thread in
// Global mode (CUDA's default): its Malloc, Free, HostAlloc, HostFree, HostRegister/Unregister, MallocManaged/FreeManaged and
// VirtualMemory calls are refused, and invalidate the capture, while any
// Global-mode capture is under way on this device. Through a ThreadLocal or Relaxed view those
// calls ignore other streams' captures, as CUDA lets such a thread make
// them, and synchronize or query streams that are not capturing. Every
// other method, and all state, is d's own.
func (d *Driver) WithInteractionMode(m driver.CaptureMode) driver.Driver {
	if m == driver.Global {
		return d
	}
	return &interactionView{Driver: d, mode: m}
}

// interactionView overrides only the device-wide unsafe calls.
type interactionView struct {
	*Driver
	mode driver.CaptureMode
}

func (v *interactionView) Malloc(size int64) (driver.DevicePtr, error) { return v.malloc(size, v.mode) }
func (v *interactionView) Free(p driver.DevicePtr) error               { return v.free(p, v.mode) }
func (v *interactionView) HostAlloc(size int64) ([]byte, error)        { return v.hostAlloc(size, v.mode) }
func (v *interactionView) HostFree(b []byte) error                     { return v.hostFree(b, v.mode) }
func (v *interactionView) HostRegister(b []byte) (driver.DevicePtr, error) {
	return v.hostRegister(b, v.mode)
}
func (v *interactionView) HostUnregister(b []byte) error { return v.hostUnregister(b, v.mode) }
func (v *interactionView) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	return v.mallocManaged(size, v.mode)
}
func (v *interactionView) FreeManaged(p driver.DevicePtr) error { return v.freeManaged(p, v.mode) }
func (v *interactionView) ReserveAddress(size int64) (driver.DevicePtr, error) {
	return v.reserveAddress(size, v.mode)
}
func (v *interactionView) ReleaseAddress(p driver.DevicePtr, size int64) error {
	return v.releaseAddress(p, size, v.mode)
}
func (v *interactionView) MapMemory(p driver.DevicePtr, size int64) error {
	return v.mapMemory(p, size, v.mode)
}
func (v *interactionView) UnmapMemory(p driver.DevicePtr, size int64) error {
	return v.unmapMemory(p, size, v.mode)
}
func (v *interactionView) StreamSynchronize(h driver.Stream) error {
	return v.wait(h, "stream synchronize", v.mode)
}
func (v *interactionView) StreamQuery(h driver.Stream) (bool, error) { return v.query(h, v.mode) }
