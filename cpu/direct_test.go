package cpu_test

import (
	"context"
	"errors"
	"testing"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/cpu"
)

// Device allocations come from the supplied DeviceMemory and go back to it
// on Free, on a queued FreeAsync and at Close.
func TestDeviceMemorySupplied(t *testing.T) {
	dm := &countingHost{live: map[*byte]int{}}
	d, err := cpu.New(cpu.Options{DeviceMemory: dm})
	ok(t, err)
	s := newStream(t, d)
	p := val[driver.DevicePtr](t)(d.Malloc(1000))
	q := val[driver.DevicePtr](t)(d.MallocAsync(3000, s))
	r := val[driver.DevicePtr](t)(d.Malloc(500))
	if len(dm.live) != 3 {
		t.Fatalf("%d supplied regions, want 3", len(dm.live))
	}
	b := directSpan(t, d, p, 1000, s)
	if !dm.owns(b) {
		t.Fatal("DirectSpan of a whole allocation is not the supplied slice")
	}
	ok(t, d.Free(p))
	ok(t, d.FreeAsync(q, s))
	if dm.freed != 1 {
		t.Fatalf("freed %d, want 1 before the stream runs its free", dm.freed)
	}
	ok(t, d.StreamSynchronize(s))
	if dm.freed != 2 {
		t.Fatalf("freed %d, want 2", dm.freed)
	}
	_ = r
	ok(t, d.Close())
	if dm.freed != 3 || len(dm.live) != 0 {
		t.Fatalf("after Close: freed %d, %d still live", dm.freed, len(dm.live))
	}
}

// A supplier failure is ErrOutOfMemory with the accounting intact.
func TestDeviceMemorySupplierFails(t *testing.T) {
	dm := &countingHost{live: map[*byte]int{}, fail: errors.New("no memfd")}
	d := newDriver(t, cpu.Options{DeviceMemory: dm})
	_, err := d.Malloc(4096)
	isErr(t, err, alloc.ErrOutOfMemory)
	wantLive(t, d, 0)
	if d.LiveAllocations() != 0 {
		t.Fatal("a failed allocation is counted")
	}
	dm.fail = nil
	p := val[driver.DevicePtr](t)(d.Malloc(4096))
	ok(t, d.Free(p))
}

func TestDeviceMemoryFromChoice(t *testing.T) {
	dm := &countingHost{live: map[*byte]int{}}
	drv, err := backends.Choice{Name: "cpu", Memory: backends.Memory{Device: dm}}.Open(context.Background())
	ok(t, err)
	defer drv.Close()
	p := val[driver.DevicePtr](t)(drv.Malloc(64))
	if len(dm.live) != 1 {
		t.Fatal("the registered factory does not take the choice's device memory")
	}
	ok(t, drv.Free(p))
}

// DirectSpan runs the stream's queued work first and shares the bytes with
// later work on the stream.
func TestDirectSpanOrdersWithStream(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(1 << 20))
	ok(t, d.MemsetAsync(p, 7, 1<<20, s))
	b := directSpan(t, d, p+100, 1000, s)
	if len(b) != 1000 || cap(b) != 1000 {
		t.Fatalf("span len %d cap %d, want 1000", len(b), cap(b))
	}
	wantBytes(t, b, 7)
	fill := b[:]
	for i := range fill {
		fill[i] = 9
	}
	out := make([]byte, 1002)
	ok(t, d.CopyDtoH(out, p+99, s))
	if out[0] != 7 || out[1001] != 7 {
		t.Fatal("DirectSpan's span is not exactly [p, p+n)")
	}
	wantBytes(t, out[1:1001], 9)
	if unsafe.SliceData(b) == unsafe.SliceData(out) {
		t.Fatal("impossible aliasing")
	}
}

// Range and pointer errors are CopyHtoD's; queued failures are reported.
func TestDirectSpanErrors(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(100))
	_, _, err := d.DirectSpan(p, 101, s)
	isErr(t, err, alloc.ErrInvalidValue)
	_, _, err = d.DirectSpan(p+50, 51, s)
	isErr(t, err, alloc.ErrInvalidValue)
	_, _, err = d.DirectSpan(p, -1, s)
	isErr(t, err, alloc.ErrInvalidValue)
	_, _, err = d.DirectSpan(driver.DevicePtr(12345), 1, s)
	isErr(t, err, alloc.ErrInvalidValue)
	_, _, err = d.DirectSpan(p, 1, driver.Stream(999))
	if err == nil {
		t.Fatal("unknown stream accepted")
	}
	ok(t, d.Free(p))
	_, _, err = d.DirectSpan(p, 1, s)
	isErr(t, err, alloc.ErrInvalidValue)
	ok(t, d.Close())
	_, _, err = d.DirectSpan(p, 1, s)
	isErr(t, err, alloc.ErrClosed)
}

// During a capture DirectSpan is refused like a blocking copy, with the
// same errors, and invalidates the capture.
func TestDirectSpanRefusedDuringCapture(t *testing.T) {
	for _, direct := range []bool{false, true} {
		d, s := newDriverStream(t, cpu.Options{})
		p := val[driver.DevicePtr](t)(d.Malloc(64))
		ok(t, d.BeginCapture(s, alloc.Global))
		var err error
		if direct {
			_, _, err = d.DirectSpan(p, 64, s)
		} else {
			err = d.CopyHtoD(p, make([]byte, 64), s)
		}
		isErr(t, err, driver.ErrCaptureIllegalOp)
		endInvalidated(t, d, s)
		// Outside the capture it works again.
		_ = directSpan(t, d, p, 64, s)
	}
}

// directSpan is DirectSpan for a test that reads or writes the span at
// once: the stream is released before it returns.
func directSpan(t *testing.T, d *cpu.Driver, p driver.DevicePtr, n int64, s driver.Stream) []byte {
	t.Helper()
	b, release, err := d.DirectSpan(p, n, s)
	ok(t, err)
	release()
	return b
}
