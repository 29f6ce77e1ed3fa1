//go:build linux

package cpu_test

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

const gran = cpu.VMGranularity

// reserveMapped reserves chunks granules and maps the first mapped of
// them, one MapMemory call each.
func reserveMapped(t *testing.T, d *cpu.Driver, chunks, mapped int64) driver.DevicePtr {
	t.Helper()
	if g := d.MapGranularity(); g != gran {
		t.Fatalf("granularity %d, want %d", g, gran)
	}
	base := val[driver.DevicePtr](t)(d.ReserveAddress(chunks * gran))
	for i := range mapped {
		ok(t, d.MapMemory(base+driver.DevicePtr(i*gran), gran))
	}
	return base
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// Two chunks mapped by separate calls read and write as one range: memset,
// every copy and DirectSpan across their boundary. New chunks are zeroed.
func TestVMAcrossChunkBoundary(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	base := reserveMapped(t, d, 4, 2)
	wantLive(t, d, 2*gran)

	fresh := make([]byte, 2*gran)
	ok(t, d.CopyDtoH(fresh, base, s))
	wantBytes(t, fresh, 0)

	const n = 1 << 16
	at := base + driver.DevicePtr(gran-n/2) // straddles the two chunks

	ok(t, d.MemsetAsync(at, 0x5a, n, s))
	out := host(t, d, n)
	ok(t, d.CopyDtoHAsync(out, at, s))
	ok(t, d.StreamSynchronize(s))
	wantBytes(t, out, 0x5a)

	// Pinned async upload, then device to device into a Malloc'd buffer and
	// back into the other chunk's side.
	in := host(t, d, n)
	copy(in, pattern(n, 3))
	ok(t, d.CopyHtoDAsync(at, in, s))
	q := val[driver.DevicePtr](t)(d.Malloc(n))
	ok(t, d.CopyDtoDAsync(q, at, n, s))
	ok(t, d.CopyDtoDAsync(at+n, q, n, s))
	got := make([]byte, 2*n)
	ok(t, d.CopyDtoH(got, at, s))
	if !bytes.Equal(got[:n], pattern(n, 3)) || !bytes.Equal(got[n:], pattern(n, 3)) {
		t.Fatal("bytes copied across the chunk boundary differ")
	}

	// Blocking upload and DirectSpan see the same bytes.
	ok(t, d.CopyHtoD(at, pattern(n, 9), s))
	span, release, err := d.DirectSpan(at, n, s)
	ok(t, err)
	same := bytes.Equal(span, pattern(n, 9))
	release()
	if !same {
		t.Fatal("DirectSpan across the chunk boundary does not hold the uploaded bytes")
	}

	// Captured work on reserved memory replays.
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.MemsetAsync(at, 0x11, n, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.CopyDtoH(out, at, s))
	wantBytes(t, out, 0x11)
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
}

// Reserved memory that is not mapped, or no longer, fails every operation
// with ErrInvalidValue (never a fault), and so does queued or captured work
// that reaches it after an unmap. Remapping gives zeroed memory again.
func TestVMUnmappedAccessFails(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	base := reserveMapped(t, d, 4, 2)
	third := base + driver.DevicePtr(2*gran)
	buf := make([]byte, 64)
	pinned := host(t, d, 64)
	q := val[driver.DevicePtr](t)(d.Malloc(64))

	for name, at := range map[string]driver.DevicePtr{
		"unmapped chunk":        third,
		"into the unmapped one": third - 32,
	} {
		for op, err := range map[string]error{
			"memset":     d.MemsetAsync(at, 1, 64, s),
			"htod async": d.CopyHtoDAsync(at, pinned, s),
			"dtoh async": d.CopyDtoHAsync(pinned, at, s),
			"dtod src":   d.CopyDtoDAsync(q, at, 64, s),
			"dtod dst":   d.CopyDtoDAsync(at, q, 64, s),
			"htod":       d.CopyHtoD(at, buf, s),
			"dtoh":       d.CopyDtoH(buf, at, s),
		} {
			if err == nil {
				t.Fatalf("%s %s: no error", op, name)
			}
			isErr(t, err, alloc.ErrInvalidValue)
		}
		_, _, err := d.DirectSpan(at, 64, s)
		isErr(t, err, alloc.ErrInvalidValue)
	}
	ok(t, d.StreamSynchronize(s)) // refused at the call, nothing was queued

	// Work queued before the unmap runs first (UnmapMemory waits for it).
	second := base + driver.DevicePtr(gran)
	ok(t, d.MemsetAsync(second, 7, 64, s))
	ok(t, d.CopyDtoDAsync(q, second, 64, s))
	ok(t, d.UnmapMemory(second, gran))
	ok(t, d.CopyDtoH(buf, q, s))
	wantBytes(t, buf, 7)
	wantLive(t, d, gran+256)

	// A graph recorded on the chunk fails at replay once it is unmapped.
	first := base
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.MemsetAsync(first, 2, 64, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.UnmapMemory(first, gran))
	ok(t, d.GraphLaunch(e, s))
	isErr(t, d.StreamSynchronize(s), alloc.ErrInvalidValue)
	isErr(t, d.CopyDtoH(buf, first, s), alloc.ErrInvalidValue)

	// Mapped again: usable, and zeroed, not the old bytes.
	ok(t, d.MapMemory(second, gran))
	ok(t, d.CopyDtoH(buf, second, s))
	wantBytes(t, buf, 0)
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
}

// vmState is what a refused call must leave as it was.
type vmState struct {
	live   int64
	allocs int
}

func vmStateOf(d *cpu.Driver) vmState { return vmState{d.LiveBytes(), d.LiveAllocations()} }

// Every bad input is ErrInvalidValue and changes nothing: the mappings
// stay readable with their bytes, the accounting is the same.
func TestVMBadInput(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	base := val[driver.DevicePtr](t)(d.ReserveAddress(8 * gran))
	twoChunks := base + driver.DevicePtr(2*gran) // mapped by one call
	ok(t, d.MapMemory(base, gran))
	ok(t, d.MapMemory(twoChunks, 2*gran))
	ok(t, d.MemsetAsync(base, 3, gran, s))
	ok(t, d.MemsetAsync(twoChunks, 4, 2*gran, s))
	ok(t, d.StreamSynchronize(s))
	m := val[driver.DevicePtr](t)(d.Malloc(gran))
	before := vmStateOf(d)

	at := func(chunks int64) driver.DevicePtr { return base + driver.DevicePtr(chunks*gran) }
	cases := alloctest.VMBadInput(d, base, m, gran)
	maps.Copy(cases, map[string]error{
		"map: size negative":                d.MapMemory(at(5), -gran),
		"map: unknown address":              d.MapMemory(base+1<<50, gran),
		"unmap: second half of a mapping":   d.UnmapMemory(at(3), gran),
		"unmap: misaligned":                 d.UnmapMemory(base+4096, gran),
		"unmap: in a Malloc allocation":     d.UnmapMemory(m, gran),
		"free: a reservation":               d.Free(base),
		"free async: a reservation":         d.FreeAsync(base, s),
		"reserve: one byte past a multiple": second(d.ReserveAddress(gran + 1)),
		"reserve: size negative":            second(d.ReserveAddress(-gran)),
		"memset: past the reservation end":  d.MemsetAsync(at(8)-1, 0, 2, s),
	})
	for name, err := range cases {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if !strings.HasPrefix(name, "memset") {
			isErr(t, err, alloc.ErrInvalidValue)
		}
	}
	_, err := d.ReserveAddress(2 << 40)
	isErr(t, err, alloc.ErrOutOfMemory)

	if got := vmStateOf(d); got != before {
		t.Fatalf("refused calls changed the state: %+v, was %+v", got, before)
	}
	out := make([]byte, 4*gran)
	ok(t, d.CopyDtoH(out[:gran], base, s))
	wantBytes(t, out[:gran], 3)
	ok(t, d.CopyDtoH(out[:2*gran], twoChunks, s))
	wantBytes(t, out[:2*gran], 4)

	// The right calls still work, and leave nothing behind.
	ok(t, d.UnmapMemory(twoChunks, 2*gran))
	ok(t, d.UnmapMemory(base, gran))
	ok(t, d.ReleaseAddress(base, 8*gran))
	isErr(t, d.ReleaseAddress(base, 8*gran), alloc.ErrInvalidValue)
	isErr(t, d.MapMemory(base, gran), alloc.ErrInvalidValue)
	ok(t, d.Free(m))
	if got := vmStateOf(d); got != (vmState{}) {
		t.Fatalf("after releasing everything: %+v", got)
	}
}

func second[T any](_ T, err error) error { return err }

// Mapped bytes count against MemoryLimit with Malloc's: a mapping past it
// fails with ErrOutOfMemory and maps nothing; unmapping gives room back.
func TestVMMemoryLimit(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{MemoryLimit: 3 * gran})
	base := val[driver.DevicePtr](t)(d.ReserveAddress(16 * gran)) // more than the device has
	ok(t, d.MapMemory(base, 2*gran))
	err := d.MapMemory(base+driver.DevicePtr(2*gran), 2*gran)
	isErr(t, err, alloc.ErrOutOfMemory)
	wantLive(t, d, 2*gran)
	isErr(t, d.MemsetAsync(base+driver.DevicePtr(2*gran), 1, 1, s), alloc.ErrInvalidValue)

	_, err = d.Malloc(gran + 1)
	isErr(t, err, alloc.ErrOutOfMemory)
	m := val[driver.DevicePtr](t)(d.Malloc(gran))
	isErr(t, d.MapMemory(base+driver.DevicePtr(2*gran), gran), alloc.ErrOutOfMemory)
	ok(t, d.Free(m))
	ok(t, d.MapMemory(base+driver.DevicePtr(2*gran), gran))
	wantLive(t, d, 3*gran)

	ok(t, d.UnmapMemory(base, 2*gran))
	wantLive(t, d, gran)
	m = val[driver.DevicePtr](t)(d.Malloc(2 * gran))
	ok(t, d.Free(m))
}

// vmChunks counts the chunk mappings in this process (/proc/self/maps
// names them after their memfd).
func vmChunks(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	ok(t, err)
	return strings.Count(string(b), "memfd:capalloc-vm")
}

// Usage shows mapped memory like Malloc's, a reservation counts as one live
// allocation, and Close releases reservations with their chunks still
// mapped; the driver's calls then fail with ErrClosed.
func TestVMUsageAndClose(t *testing.T) {
	chunks := vmChunks(t)
	d, err := cpu.New(cpu.Options{})
	ok(t, err)
	base := reserveMapped(t, d, 4, 3)
	u := val[driver.Usage](t)(d.Usage())
	if u.Device != 3*gran || d.LiveAllocations() != 1 {
		t.Fatalf("usage %+v, %d allocations; want %d B in 1", u, d.LiveAllocations(), 3*gran)
	}
	if got := vmChunks(t) - chunks; got != 3 {
		t.Fatalf("%d chunk mappings in the process, want 3", got)
	}
	ok(t, d.UnmapMemory(base+driver.DevicePtr(gran), gran))
	if got := vmChunks(t) - chunks; got != 2 {
		t.Fatalf("%d chunk mappings after an unmap, want 2", got)
	}
	ok(t, d.Close())
	if got := vmChunks(t) - chunks; got != 0 {
		t.Fatalf("%d chunk mappings left after Close", got)
	}
	isErr(t, d.MapMemory(base+driver.DevicePtr(gran), gran), alloc.ErrClosed)
	isErr(t, d.UnmapMemory(base, gran), alloc.ErrClosed)
	isErr(t, d.ReleaseAddress(base, 4*gran), alloc.ErrClosed)
	_, err = d.ReserveAddress(gran)
	isErr(t, err, alloc.ErrClosed)
}

// Virtual memory calls are device-wide unsafe like Malloc: refused during
// a Global-mode capture (invalidating it) for a Global caller, allowed
// through a Relaxed interaction view.
func TestVMDuringCapture(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	base := reserveMapped(t, d, 4, 1)
	ok(t, d.BeginCapture(s, alloc.Global))
	isErr(t, d.MapMemory(base+driver.DevicePtr(gran), gran), driver.ErrCaptureIllegalOp)
	wantStatus(t, d, s, driver.CaptureInvalidated)
	isErr(t, d.UnmapMemory(base, gran), driver.ErrCaptureIllegalOp)
	_, err := d.ReserveAddress(gran)
	isErr(t, err, driver.ErrCaptureIllegalOp)
	_, err = d.EndCapture(s)
	isErr(t, err, alloc.ErrCaptureInvalidated)

	relaxed := d.WithInteractionMode(alloc.Relaxed).(driver.VirtualMemory)
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, relaxed.MapMemory(base+driver.DevicePtr(gran), gran))
	ok(t, relaxed.UnmapMemory(base+driver.DevicePtr(gran), gran))
	wantStatus(t, d, s, driver.CaptureActive)
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, gran)
}

// With supplied device memory (the plugin server's shared regions) the
// driver offers no virtual memory: a chunk could not be shared.
func TestVMNotWithSuppliedMemory(t *testing.T) {
	d := newDriver(t, cpu.Options{DeviceMemory: &countingHost{live: map[*byte]int{}}})
	if g := d.MapGranularity(); g != 0 {
		t.Fatalf("granularity %d with supplied memory, want 0", g)
	}
	_, err := d.ReserveAddress(gran)
	isErr(t, err, driver.ErrBackendUnavailable)
	isErr(t, d.MapMemory(1<<40, gran), driver.ErrBackendUnavailable)
}

// Operations on mapped chunks run while other chunks of the same
// reservation are mapped and unmapped, under -race: every operation on a
// chunk that is being cycled either works or fails with ErrInvalidValue.
func TestVMConcurrentMapAndUse(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	base := reserveMapped(t, d, 4, 2) // chunks 0 and 1 stay; 2 and 3 cycle
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		s := newStream(t, d)
		wg.Go(func() {
			buf := make([]byte, 4096)
			at := base + driver.DevicePtr(gran-2048) // across the stable chunks' boundary
			cycled := base + driver.DevicePtr(int64(2+w)*gran)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := byte(w*100 + i%100)
				if err := d.MemsetAsync(at+driver.DevicePtr(w*4096), v, 4096, s); err != nil {
					t.Error(err)
					return
				}
				if err := d.CopyDtoH(buf, at+driver.DevicePtr(w*4096), s); err != nil {
					t.Error(err)
					return
				}
				if buf[0] != v || buf[4095] != v {
					t.Errorf("read %d..%d, want %d", buf[0], buf[4095], v)
					return
				}
				err := d.MemsetAsync(cycled, v, 4096, s)
				if err == nil {
					err = d.StreamSynchronize(s)
				}
				if err != nil && !errors.Is(err, alloc.ErrInvalidValue) {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 50 {
		for c := int64(2); c < 4; c++ {
			ok(t, d.MapMemory(base+driver.DevicePtr(c*gran), gran))
		}
		for c := int64(2); c < 4; c++ {
			ok(t, d.UnmapMemory(base+driver.DevicePtr(c*gran), gran))
		}
	}
	close(stop)
	wg.Wait()
	wantLive(t, d, 2*gran)
}
