package plugin

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.HostRegisterer = (*Driver)(nil)

// errHostRegister says why a plugin cannot register host memory: the
// runtime that would pin it runs in the backend process, which cannot
// reach this process's memory (a Go slice, a private mapping); only
// regions the backend created and shares (HostAlloc's) cross the boundary.
var errHostRegister = fmt.Errorf("%w: plugin: host memory of the engine's process cannot be registered by the backend's process (its runtime pins only memory it maps itself); use HostAlloc's shared buffers, or an in-process backend", errors.ErrUnsupported)

// HostRegister refuses, with no call to the backend: errHostRegister.
func (d *Driver) HostRegister(b []byte) (driver.DevicePtr, error) { return 0, errHostRegister }

// HostUnregister refuses as HostRegister does: nothing was registered.
func (d *Driver) HostUnregister(b []byte) error { return errHostRegister }
