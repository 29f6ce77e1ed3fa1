package alloc_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// vmDriver is a cpu driver with a fake driver.VirtualMemory of its own:
// reservations at addresses no cpu allocation uses, mappings checked the
// way CUDA checks them (inside a reservation, whole granules, unmapped
// exactly as mapped) and counted against a limit of their own. It records
// every call, so tests can prove when none was made. Its addresses hold no
// memory: enough for the pool's Alloc, Free, Stats and traces, not for
// copies.
type vmDriver struct {
	*cpu.Driver
	gran int64

	mu       sync.Mutex
	limit    int64 // bytes that may be mapped at once; 0: no limit
	mapped   int64
	maps     map[driver.DevicePtr]int64 // live mappings
	starts   []driver.DevicePtr         // their addresses, sorted
	reserved map[driver.DevicePtr]int64 // live reservations
	next     driver.DevicePtr
	calls    map[string]int // by method
	ipc      int            // IPC calls
}

func newVMDriver(t testing.TB, limit int64) *vmDriver {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: 64 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &vmDriver{
		Driver: d, gran: 4 << 10, limit: limit,
		maps: map[driver.DevicePtr]int64{}, reserved: map[driver.DevicePtr]int64{},
		next: 1 << 56, calls: map[string]int{},
	}
}

func (d *vmDriver) MapGranularity() int64 { return d.gran }

// call counts one call of method and takes d's lock; the returned
// function releases it.
func (d *vmDriver) call(method string) (unlock func()) {
	d.mu.Lock()
	d.calls[method]++
	return d.mu.Unlock
}

func (d *vmDriver) ReserveAddress(size int64) (driver.DevicePtr, error) {
	defer d.call("ReserveAddress")()
	if size <= 0 || size%d.gran != 0 {
		return 0, fmt.Errorf("%w: reserve %d B", alloc.ErrInvalidValue, size)
	}
	p := d.next
	d.next += driver.DevicePtr(size) + driver.DevicePtr(d.gran) // a guard granule between ranges
	d.reserved[p] = size
	return p, nil
}

func (d *vmDriver) ReleaseAddress(base driver.DevicePtr, size int64) error {
	defer d.call("ReleaseAddress")()
	if d.reserved[base] != size {
		return fmt.Errorf("%w: release %#x+%d: not a reservation", alloc.ErrInvalidValue, base, size)
	}
	if i, _ := slices.BinarySearch(d.starts, base); i < len(d.starts) && d.starts[i] < base+driver.DevicePtr(size) {
		return fmt.Errorf("%w: release %#x: %#x still mapped", alloc.ErrInvalidValue, base, d.starts[i])
	}
	delete(d.reserved, base)
	return nil
}

func (d *vmDriver) MapMemory(p driver.DevicePtr, size int64) error {
	defer d.call("MapMemory")()
	if size <= 0 || size%d.gran != 0 || int64(p)%d.gran != 0 || !d.insideLocked(p, size) {
		return fmt.Errorf("%w: map %#x+%d", alloc.ErrInvalidValue, p, size)
	}
	i, _ := slices.BinarySearch(d.starts, p) // the first mapping at or above p
	if i > 0 {
		if q := d.starts[i-1]; q+driver.DevicePtr(d.maps[q]) > p {
			return fmt.Errorf("%w: map %#x+%d overlaps %#x", alloc.ErrInvalidValue, p, size, q)
		}
	}
	if i < len(d.starts) && d.starts[i] < p+driver.DevicePtr(size) {
		return fmt.Errorf("%w: map %#x+%d overlaps %#x", alloc.ErrInvalidValue, p, size, d.starts[i])
	}
	if d.limit > 0 && d.mapped+size > d.limit {
		return fmt.Errorf("%w: map %d B with %d of %d mapped", alloc.ErrOutOfMemory, size, d.mapped, d.limit)
	}
	d.maps[p] = size
	d.starts = slices.Insert(d.starts, i, p)
	d.mapped += size
	return nil
}

func (d *vmDriver) UnmapMemory(p driver.DevicePtr, size int64) error {
	defer d.call("UnmapMemory")()
	if d.maps[p] != size {
		return fmt.Errorf("%w: unmap %#x+%d: not a mapping", alloc.ErrInvalidValue, p, size)
	}
	delete(d.maps, p)
	i, _ := slices.BinarySearch(d.starts, p)
	d.starts = slices.Delete(d.starts, i, i+1)
	d.mapped -= size
	return nil
}

func (d *vmDriver) insideLocked(p driver.DevicePtr, size int64) bool {
	for b, n := range d.reserved {
		if p >= b && p+driver.DevicePtr(size) <= b+driver.DevicePtr(n) {
			return true
		}
	}
	return false
}

// vmCalls is the number of VirtualMemory calls made so far.
func (d *vmDriver) vmCalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls["ReserveAddress"] + d.calls["ReleaseAddress"] + d.calls["MapMemory"] + d.calls["UnmapMemory"]
}

func (d *vmDriver) count(m string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[m]
}

// state is the bytes mapped and the live reservations.
func (d *vmDriver) state() (mapped int64, reservations int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mapped, len(d.reserved)
}

// IPCMemory, so the allocator's export refusal is tested against a driver
// that could export.
func (d *vmDriver) IPCGetMemHandle(p driver.DevicePtr) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ipc++
	return []byte{1}, nil
}

func (d *vmDriver) IPCOpenMemHandle([]byte) (driver.DevicePtr, error) {
	return 0, fmt.Errorf("%w: not in this fake", alloc.ErrInvalidValue)
}

func (d *vmDriver) IPCCloseMemHandle(driver.DevicePtr) error { return nil }
