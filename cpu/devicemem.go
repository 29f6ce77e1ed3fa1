package cpu

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// newDevice backs a device allocation: supplied memory (Options.DeviceMemory)
// or the Go heap. Either way the bytes start zeroed.
func (d *Driver) newDevice(size int64) ([]byte, error) { return newFrom(d.devMem, "device", size) }

// newFrom is size bytes from mem, a supplier of the kind what names
// ("device", "host"), or from the Go heap when mem is nil; zeroed either
// way. A supplier that returns another size gets its slice back.
func newFrom(mem driver.HostMemory, what string, size int64) ([]byte, error) {
	if mem == nil {
		return make([]byte, size), nil
	}
	b, err := mem.Alloc(size)
	if err == nil && int64(len(b)) != size {
		_ = mem.Free(b)
		return nil, fmt.Errorf("%s memory supplier returned %d B for %d B", what, len(b), size)
	}
	return b, err
}

// dropDevice gives supplied memory back once an allocation is released; Go
// heap memory is the GC's. Released allocations are dead, so queued work
// that still names one fails before touching its bytes; a use racing the
// release itself is the caller's use-after-free, as on a device. The
// supplier only refuses slices it did not hand out, which a released
// allocation's never is, so its error has nowhere useful to go.
func (d *Driver) dropDevice(b []byte) {
	if d.devMem != nil {
		_ = d.devMem.Free(b)
	}
}
