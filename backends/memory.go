package backends

import "github.com/capalloc/capalloc/alloc/driver"

// The memory suppliers a program may hand a backend along with its options
// (Choice.Memory): declared in alloc/driver, where a backend's opener
// receives them, and named here for programs that build a Choice.
type (
	HostMemory   = driver.HostMemory
	DeviceMemory = driver.DeviceMemory
	Memory       = driver.Memory
)
