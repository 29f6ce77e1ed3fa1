package backends

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

// DeviceMemory supplies the memory behind a backend's device allocations,
// with HostMemory's contract (Alloc returns zeroed memory, Free takes it
// back exactly as returned). Only a backend whose device memory is host
// memory (cpu) can take it. The plugin server passes one backed by shared
// memory (memfd), so the engine's process can read and write device bytes
// itself: a pageable blocking copy is then one memcpy instead of two.
type DeviceMemory = HostMemory

// Memory holds the suppliers a program may hand a backend along with its
// options (Choice.Memory); nil fields mean the backend's own memory. They
// are objects, not strings, so a config string never carries them.
type Memory struct {
	Host   HostMemory
	Device DeviceMemory
}
