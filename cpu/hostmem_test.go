package cpu_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/cpu"
)

// countingHost is a HostMemory that records what it handed out.
type countingHost struct {
	mu    sync.Mutex
	live  map[*byte]int
	fail  error
	freed int
}

func (h *countingHost) Alloc(size int64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail != nil {
		return nil, h.fail
	}
	b := make([]byte, size)
	h.live[unsafe.SliceData(b)] = len(b)
	return b, nil
}

func (h *countingHost) Free(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := unsafe.SliceData(b)
	if h.live[p] != len(b) {
		return errors.New("not mine")
	}
	delete(h.live, p)
	h.freed++
	return nil
}

func (h *countingHost) owns(b []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[unsafe.SliceData(b)] == len(b)
}

func TestHostMemorySupplier(t *testing.T) {
	hm := &countingHost{live: map[*byte]int{}}
	d := newDriver(t, cpu.Options{MemoryLimit: 1 << 20, HostMemory: hm})
	s := val[driver.Stream](t)(d.CreateStream())
	h := val[[]byte](t)(d.HostAlloc(4096))
	if !hm.owns(h) {
		t.Fatal("HostAlloc did not return the supplier's memory")
	}
	// It is pinned memory: a capture may copy from it.
	p := val[driver.DevicePtr](t)(d.MallocAsync(4096, s))
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.CopyHtoDAsync(p, h, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	ok(t, d.GraphDestroy(g))

	ok(t, d.HostFree(h))
	if hm.owns(h) || hm.freed != 1 {
		t.Fatal("HostFree did not give the memory back to the supplier")
	}
	if d.HostBytes() != 0 {
		t.Fatalf("HostBytes %d after free", d.HostBytes())
	}

	// A supplier failure is an out-of-memory and changes nothing.
	hm.fail = errors.New("no shared memory left")
	_, err := d.HostAlloc(4096)
	isErr(t, err, alloc.ErrOutOfMemory)
	if d.HostBytes() != 0 {
		t.Fatalf("a failed HostAlloc left %d B counted", d.HostBytes())
	}
	hm.fail = nil

	// Close gives back what is still allocated.
	val[[]byte](t)(d.HostAlloc(100))
	val[[]byte](t)(d.HostAlloc(200))
	ok(t, d.FreeAsync(p, s))
	ok(t, d.Close())
	if len(hm.live) != 0 || hm.freed != 3 {
		t.Fatalf("after Close: %d still live, %d freed", len(hm.live), hm.freed)
	}
}

func TestHostMemoryFromChoice(t *testing.T) {
	hm := &countingHost{live: map[*byte]int{}}
	drv, err := backends.Choice{Name: "cpu", Memory: backends.Memory{Host: hm}}.Open(context.Background())
	ok(t, err)
	defer drv.Close()
	h := val[[]byte](t)(drv.HostAlloc(64))
	if !hm.owns(h) {
		t.Fatal("the cpu factory ignored the choice's host memory")
	}
	ok(t, drv.HostFree(h))
}
