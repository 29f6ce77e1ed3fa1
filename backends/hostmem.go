package backends

import "context"

// HostMemory supplies the memory a backend's HostAlloc hands out and takes
// it back at HostFree. The plugin server passes one backed by shared memory
// (memfd), so pinned host buffers are visible to the engine's process and
// async copies never carry bytes over RPC. A backend that must pin memory
// itself (CUDA, HIP) registers what Alloc returns (cudaHostRegister) rather
// than allocating its own.
type HostMemory interface {
	// Alloc returns size bytes of zeroed memory.
	Alloc(size int64) ([]byte, error)
	// Free releases a slice Alloc returned, passed exactly as returned.
	Free(b []byte) error
}

type hostMemoryKey struct{}

// WithHostMemory returns ctx carrying hm, for a Factory to find with
// HostMemoryFrom. Factories take options as strings; this is the one
// setting that is an object.
func WithHostMemory(ctx context.Context, hm HostMemory) context.Context {
	return context.WithValue(ctx, hostMemoryKey{}, hm)
}

// HostMemoryFrom returns the HostMemory ctx carries, or nil: the backend
// then uses its own.
func HostMemoryFrom(ctx context.Context) HostMemory {
	hm, _ := ctx.Value(hostMemoryKey{}).(HostMemory)
	return hm
}
