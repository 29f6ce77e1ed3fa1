package gpurt

import (
	"fmt"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Sym is one bound function of the runtime: its address (0 when it is not
// resolved) and its name in the vendor's library, for error messages.
type Sym struct {
	Addr uintptr
	Name string
}

// Syms are the functions the shared paths call, resolved by the vendor
// package from its own names (cuda/symbols.go and hip/symbols.go list
// each signature, cited from the vendor's header). The signatures are the same in both runtimes, with
// cuda/hip prefixes; HostAlloc and HostFree are cudaHostAlloc/cudaFreeHost
// and hipHostMalloc/hipHostFree. Calls go through Call or CallHot on Addr.
type Syms struct {
	GetDeviceCount, SetDevice, DeviceGetAttribute, MemGetInfo  Sym
	StreamCreateWithPriority, StreamDestroy, StreamSynchronize Sym
	StreamQuery, StreamIsCapturing                             Sym
	Malloc, Free                                               Sym
	MemPoolCreate, MemPoolDestroy, DeviceGetDefaultMemPool     Sym
	MemPoolSetAttribute, MallocFromPoolAsync, FreeAsync        Sym
	MemPoolTrimTo, LaunchHostFunc                              Sym
	HostAlloc, HostFree, MemcpyAsync, MemsetAsync              Sym
	HostRegister, HostUnregister                               Sym
	StreamBeginCapture, StreamEndCapture                       Sym
	GraphInstantiateWithFlags, GraphLaunch, GraphExecDestroy   Sym
	GraphDestroy, ThreadExchangeCaptureMode                    Sym
	IPCGetMemHandle, IPCOpenMemHandle, IPCCloseMemHandle       Sym
	MemPoolExportToShareableHandle                             Sym
	MemPoolImportFromShareableHandle                           Sym
	MemPoolExportPointer, MemPoolImportPointer                 Sym
	GraphMemTrim                                               Sym // optional in both: Addr 0 when missing
	HostGetDevicePointer                                       Sym // optional in both (hostreg.go)
	// Optional in both (managed.go): managed memory, and its prefetch in
	// one of two ABIs, whichever the vendor bound for the runtime's
	// version: MemPrefetchAsync takes the destination as a device ordinal
	// (-1: the host), MemPrefetchLocation as a location struct and flags
	// (CUDA 13's cudaMemPrefetchAsync).
	MallocManaged, MemPrefetchAsync, MemPrefetchLocation Sym
	// Optional in both (topology.go): the device's PCI bus id, and peer
	// access between devices of this process.
	DeviceGetPCIBusId, DeviceCanAccessPeer, DeviceEnablePeerAccess Sym
}

// Binding is one symbol to resolve: optional ones may be missing (the
// feature they serve degrades), required ones refuse the library.
type Binding struct {
	Name     string
	Sym      *Sym
	Optional bool
}

// Resolve looks every binding up with Dlsym (never RegisterLibFunc, which
// panics on a missing symbol). Every Sym gets its name, found or not.
func (v *Vendor) Resolve(handle uintptr, path string, bs []Binding) error {
	var missing []string
	for _, b := range bs {
		b.Sym.Name = b.Name
		addr, err := purego.Dlsym(handle, b.Name)
		if err != nil || addr == 0 {
			if !b.Optional {
				missing = append(missing, b.Name)
			}
			continue
		}
		b.Sym.Addr = addr
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s: %s: lacks required symbols %v", driver.ErrBackendUnavailable, v.Name, path, missing)
	}
	return nil
}

// Identify looks up the calls that make a library the vendor's runtime
// (its version and error-string calls) before any is made. A library
// without one is not a runtime of product's ("CUDA", "HIP"): the error
// wraps driver.ErrBackendUnavailable, and the loader moves on.
func (v *Vendor) Identify(handle uintptr, path, product string, bs ...Binding) error {
	for _, b := range bs {
		b.Sym.Name = b.Name
		addr, err := purego.Dlsym(handle, b.Name)
		if err != nil || addr == 0 {
			return fmt.Errorf("%w: %s: %s: not a %s runtime: no symbol %s", driver.ErrBackendUnavailable, v.Name, path, product, b.Name)
		}
		b.Sym.Addr = addr
	}
	return nil
}

// Required is a binding whose absence refuses the library.
func Required(name string, s *Sym) Binding { return Binding{Name: name, Sym: s} }

// Optional is a binding whose absence degrades the feature it serves.
func Optional(name string, s *Sym) Binding { return Binding{Name: name, Sym: s, Optional: true} }
