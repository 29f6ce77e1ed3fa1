package gpurt

import (
	"fmt"
	"math"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Vendor is what a runtime's package tells this one: its name and the
// constants of its ABI, each taken (and cited) from its own headers in its
// abi.go. One per package, never changed after init.
type Vendor struct {
	// Name is the backend name ("cuda", "hip"): Driver.Name, the capture
	// domain (Global-mode captures are process wide in both runtimes) and
	// the prefix of every error ("cuda: ...").
	Name string

	// Alignment is the guaranteed alignment of device allocations.
	Alignment int64

	// Error codes the shared paths act on.
	NotReady     int32 // cudaErrorNotReady / hipErrorNotReady: a stream query
	NotSupported int32 // from begin capture: this device cannot capture
	// PeerAccessAlreadyEnabled: enabling peer access a second time
	// (success for EnablePeerAccess).
	PeerAccessAlreadyEnabled int32

	// Stream capture status, as the is-capturing call reports it.
	CaptureStatusNone, CaptureStatusActive, CaptureStatusInvalidated int32
	// Stream capture mode, and thread interaction mode.
	CaptureModeGlobal, CaptureModeThreadLocal, CaptureModeRelaxed uintptr

	// Memcpy kinds.
	MemcpyHostToDevice, MemcpyDeviceToHost, MemcpyDeviceToDevice uintptr

	// Flags.
	HostAllocPortable                uintptr // pinned for every context
	HostRegisterPortable             uintptr // registered for every context
	HostRegisterMapped               uintptr // mapped into the device's address space (hostreg.go)
	StreamNonBlocking                uintptr
	GraphInstantiateAutoFreeOnLaunch uintptr

	// Memory pools.
	MemPoolAttrReleaseThreshold uintptr // the value is a 64-bit unsigned
	MemAllocationTypePinned     int32
	MemHandleTypeNone           int32
	MemHandleTypePosixFD        int32
	MemLocationTypeDevice       int32
	MemLocationTypeHost         int32 // a prefetch's location (managed.go)

	// Managed memory (managed.go).
	MemAttachGlobal uintptr // managed memory any stream of any device reaches
	CPUDeviceID     int32   // the host as a prefetch's device ordinal

	// Device attributes (the runtimes number them differently).
	DevAttrIntegrated          uintptr
	DevAttrMaxThreadsPerBlock  uintptr
	DevAttrMultiprocessorCount uintptr
	// The safety profile's attributes (driver.DeviceInfo).
	DevAttrComputeCapabilityMajor uintptr
	DevAttrComputeCapabilityMinor uintptr
	DevAttrPageableMemoryAccess   uintptr

	// SeparateCapturePool: an exportable pool cannot serve graph
	// allocations (CUDA: 801 in a capture, measured on an H100), so with
	// Options.IPC captures allocate from a second pool that is not
	// exportable.
	SeparateCapturePool bool

	// Type names in the IPC size errors: cudaIpcMemHandle_t,
	// cudaMemPoolPtrExportData; hipIpcMemHandle_t, hipMemPoolPtrExportData.
	IPCHandleType, PtrExportDataType string

	// MissingHostFuncNote ends the error of LaunchHostFunc on a library
	// without the (optional) host function symbol.
	MissingHostFuncNote string
}

// Errf is a backend error that did not come from a runtime call:
// "<sentinel>: <vendor>: <message>".
func (v *Vendor) Errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+v.Name+": "+format, append([]any{sentinel}, args...)...)
}

// ErrClosed is the error of a call on a closed driver.
func (v *Vendor) ErrClosed(op string) error {
	return v.Errf(driver.ErrClosed, "%s: driver is closed", op)
}

// DefaultReleaseThreshold keeps every byte the pool has reserved (the
// pool's threshold is a 64-bit unsigned; UINT64_MAX means "never trim at
// synchronize").
const DefaultReleaseThreshold uint64 = math.MaxUint64

// Options are the options both drivers take (cuda.Options and
// hip.Options document them).
type Options struct {
	Device           int
	ReleaseThreshold int64
	Reserve          int64
	DefaultPool      bool
	StreamPriority   int
	Blocking         bool
	HostMemory       driver.HostMemory
	IPC              bool
	CaptureSafety    driver.CaptureSafety
}

// Validate refuses options no driver can honour, before anything loads.
func (v *Vendor) Validate(o Options) error {
	switch {
	case o.Device < 0:
		return v.Errf(driver.ErrInvalidValue, "device ordinal %d is negative", o.Device)
	case o.ReleaseThreshold < 0:
		return v.Errf(driver.ErrInvalidValue, "release threshold %d B is negative", o.ReleaseThreshold)
	case o.Reserve < 0:
		return v.Errf(driver.ErrInvalidValue, "reserve %d B is negative", o.Reserve)
	case o.Reserve > 0 && o.ReleaseThreshold > 0 && o.Reserve > o.ReleaseThreshold:
		return v.Errf(driver.ErrInvalidValue, "reserve %d B exceeds release threshold %d B: the pool would return it at the first synchronize",
			o.Reserve, o.ReleaseThreshold)
	case o.IPC && o.DefaultPool:
		return v.Errf(driver.ErrInvalidValue, "ipc needs a pool of the driver's own, created exportable; the default pool's handle types are not this driver's to choose")
	}
	return nil
}

// Threshold is the pool release threshold the options ask for.
func (o Options) Threshold() uint64 {
	if o.ReleaseThreshold == 0 {
		return DefaultReleaseThreshold
	}
	return uint64(o.ReleaseThreshold)
}

// streamFlags is the non-blocking flag unless Options.Blocking asks for a
// stream that synchronizes with the legacy default stream.
func (d *Driver) streamFlags() uintptr {
	if d.opts.Blocking {
		return 0
	}
	return d.v.StreamNonBlocking
}
