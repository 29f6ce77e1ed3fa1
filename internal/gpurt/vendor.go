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

	// Device attributes: the runtimes number them differently.
	DevAttrIntegrated          uintptr
	DevAttrMaxThreadsPerBlock  uintptr
	DevAttrMultiprocessorCount uintptr
	// The safety profile's attributes (driver.DeviceInfo).
	DevAttrComputeCapabilityMajor uintptr
	DevAttrComputeCapabilityMinor uintptr
	DevAttrPageableMemoryAccess   uintptr
	// DevAttrHostPageTables is ...PageableMemoryAccessUsesHostPageTables:
	// the device reads pageable memory through the host's page tables
	// (ATS), not the driver's mirror of them (HMM).
	DevAttrHostPageTables uintptr

	// SeparateCapturePool: an exportable pool cannot serve graph
	// allocations (CUDA: 801 in a capture, measured on an H100), so with
	// Options.IPC captures allocate from a second pool that is not
	// exportable.
	SeparateCapturePool bool

	// Type names in the IPC size errors: cudaIpcMemHandle_t,
	// cudaMemPoolPtrExportData; hipIpcMemHandle_t, hipMemPoolPtrExportData.
	IPCHandleType, PtrExportDataType string

	// Sentinels maps the runtime's error codes to alloc's sentinels.
	Sentinels *Sentinels
	// Wrap gives a failed call's error the vendor's type (its Error, with
	// its own message format).
	Wrap func(*CallError) error

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

// Options configures a driver: cuda.Options is this type, and hip.Options
// has these fields and HIP's own. The zero value is device 0, a dedicated
// pool that never trims, default-priority non-blocking streams.
type Options struct {
	// Device is the device ordinal.
	Device int
	// ReleaseThreshold is the pool's release threshold attribute
	// (cudaMemPoolAttrReleaseThreshold, hipMemPoolAttrReleaseThreshold)
	// in bytes: memory above it is returned to the OS at synchronize. 0
	// means DefaultReleaseThreshold; there is deliberately no way to ask
	// for 0 (CUDA's own default, which returns memory at every
	// synchronize: on GB10's unified memory that stalls the process).
	ReleaseThreshold int64
	// Reserve is allocated and freed once at New, so the pool holds that
	// much from the start. It must not exceed ReleaseThreshold, or the
	// pool would give it back at the first synchronize.
	Reserve int64
	// DefaultPool uses the device's default pool
	// (cudaDeviceGetDefaultMemPool, hipDeviceGetDefaultMemPool), shared
	// with every stream-ordered allocation of the process that names no
	// pool, instead of a pool of this driver's own.
	DefaultPool bool
	// StreamPriority is passed to the stream creation
	// (cudaStreamCreateWithPriority, hipStreamCreateWithPriority: lower
	// is higher priority; CUDA clamps it to the device's range).
	StreamPriority int
	// Blocking creates streams without the non-blocking flag, so they
	// synchronize implicitly with the legacy default stream. The zero value
	// (false) gives non-blocking streams, and that is what you want: while
	// a blocking stream is capturing, in any mode, CUDA refuses work on the
	// legacy stream (906, cudaErrorStreamCaptureImplicit) and invalidates
	// the capture, so another library's cudaMemcpy or default-stream work
	// (CuPy's, for one) breaks it (measured: docs/cuda-truth.md). Ask for
	// blocking streams only when an engine relies on the legacy stream's
	// implicit ordering with this driver's streams.
	Blocking bool
	// HostMemory, when set, supplies HostAlloc's memory, which the driver
	// pins with the host-register call (cudaHostRegister, hipHostRegister)
	// instead of allocating pinned memory. The plugin server passes its
	// shared memory (driver.Memory), so pinned buffers are visible to the
	// engine's process and the plugin moves no bytes over RPC.
	HostMemory driver.HostMemory
	// IPC creates the driver's pool with POSIX file descriptor handles
	// (cudaMemHandleTypePosixFileDescriptor,
	// hipMemHandleTypePosixFileDescriptor) so it can be exported
	// (ExportPool). Not with DefaultPool.
	IPC bool
	// CaptureSafety overrides the device's classification
	// (driver.ClassifySafety; docs/capture-safety.md). SafetyUnset: strict
	// on GB10 and on every device without a recorded truth table.
	CaptureSafety driver.CaptureSafety
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
	return StreamNonBlocking
}
