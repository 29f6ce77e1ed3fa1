package plugin

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.ManagedMemory = (*Driver)(nil)

// errManaged says why a plugin has no managed memory: the runtime would
// map it into the backend process's address space, where this process
// cannot read or write it through the host view the contract promises.
var errManaged = fmt.Errorf("%w: plugin: managed memory lives in the backend process's address space, which the engine's process cannot reach; use HostAlloc's shared buffers, or an in-process backend", errors.ErrUnsupported)

// MallocManaged refuses, with no call to the backend: errManaged.
func (d *Driver) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	return 0, nil, errManaged
}

// FreeManaged refuses as MallocManaged does: nothing was allocated.
func (d *Driver) FreeManaged(p driver.DevicePtr) error { return errManaged }

// PrefetchManaged refuses as MallocManaged does.
func (d *Driver) PrefetchManaged(p driver.DevicePtr, n int64, toHost bool, s driver.Stream) error {
	return errManaged
}
