package alloc_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/internal/allocipc"
	"github.com/capalloc/capalloc/internal/syncbuf"
)

const mib = 1 << 20

func newExpandable(t testing.TB, d driver.Driver) *alloc.Allocator {
	t.Helper()
	a, err := alloc.New(d, alloc.Options{ExpandableSegments: true})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// newExpandableVM is an allocator with expandable segments on a fresh
// vmDriver of limit bytes (0: no limit).
func newExpandableVM(t *testing.T, limit int64) (*vmDriver, *alloc.Allocator) {
	t.Helper()
	d := newVMDriver(t, limit)
	return d, newExpandable(t, d)
}

// mustAlloc allocates n bytes of a, or ends the test.
func mustAlloc(t *testing.T, a *alloc.Allocator, n int64) alloc.Buffer {
	t.Helper()
	b, err := a.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustHit allocates n bytes of a and checks the allocation was a hit:
// served from chunks already mapped, with no new mapping.
func mustHit(t *testing.T, a *alloc.Allocator, d *vmDriver, n int64) alloc.Buffer {
	t.Helper()
	maps := d.count("MapMemory")
	b := mustAlloc(t, a, n)
	if d.count("MapMemory") != maps {
		t.Fatalf("%d B made %d maps; want a hit", n, d.count("MapMemory")-maps)
	}
	return b
}

// closeClean closes a and checks that the driver got every mapping and
// reservation back.
func closeClean(t *testing.T, a *alloc.Allocator, d *vmDriver) {
	t.Helper()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if mapped, res := d.state(); mapped != 0 || res != 0 {
		t.Fatalf("after Close: %d B mapped, %d reservations", mapped, res)
	}
}

// agrees checks that the allocator's reserved bytes are what the driver
// has mapped (no ordinary segment in these tests) and the pool is sound.
func agrees(t *testing.T, a *alloc.Allocator, d *vmDriver) alloc.Stats {
	t.Helper()
	if err := a.CheckPool(); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if mapped, _ := d.state(); mapped != st.BytesReserved {
		t.Fatalf("driver has %d B mapped, Stats.BytesReserved %d", mapped, st.BytesReserved)
	}
	return st
}

// A driver without VirtualMemory cannot have expandable segments: New
// says so, with an error matching errors.ErrUnsupported.
func TestExpandableNeedsVirtualMemory(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	plain := struct{ driver.Driver }{d} // only the Driver methods
	a, err := alloc.New(plain, alloc.Options{ExpandableSegments: true})
	if !errors.Is(err, errors.ErrUnsupported) || a != nil {
		t.Fatalf("New = %v, %v; want an error wrapping errors.ErrUnsupported", a, err)
	}
	a, err = alloc.New(plain, alloc.Options{Name: "after-refusal"})
	if err != nil {
		t.Fatalf("New without the option after a refusal: %v", err)
	}
	a.Close()
}

// A miss maps whole chunks at the range's end; nothing else is reserved.
func TestExpandableGrowsByChunks(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	if d.vmCalls() != 0 {
		t.Fatalf("New made %d virtual memory calls; the range is reserved on the first miss", d.vmCalls())
	}
	b := mustAlloc(t, a, 3*mib)
	st := agrees(t, a, d)
	if st.BytesReserved != 4*mib || d.count("MapMemory") != 2 || d.count("ReserveAddress") != 1 {
		t.Fatalf("3 MiB: %d B reserved, %d maps, %d reservations; want 4 MiB in 2 chunks, 1 reservation",
			st.BytesReserved, d.count("MapMemory"), d.count("ReserveAddress"))
	}
	c := mustAlloc(t, a, 512<<10) // a small request has its own range: not the large block's free 1 MiB rest
	st = agrees(t, a, d)
	if st.BytesReserved != 6*mib || d.count("ReserveAddress") != 2 {
		t.Fatalf("small request: %d B reserved, %d reservations; want 6 MiB, 2 ranges", st.BytesReserved, d.count("ReserveAddress"))
	}
	a.Free(b)
	a.Free(c)
	closeClean(t, a, d)
}

// A hit in a range takes the place in the free block whose chunks are
// the fewest: a 2 MiB buffer in a free block that starts half-way into a
// chunk takes the next whole chunk, not the ends of two, so once its
// neighbours are gone Trim leaves one chunk mapped for it, not two.
func TestExpandableHitTakesFewestChunks(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	w := mustAlloc(t, a, 1*mib+mib/2) // [0, 1.5 MiB): one chunk mapped
	x := mustAlloc(t, a, 4*mib+mib/2) // [1.5 MiB, 6 MiB): the rest of the first chunk and two more
	if x.Ptr() != w.Ptr()+driver.DevicePtr(w.Size()) {
		t.Fatalf("x at %#x, want right after w (%#x)", x.Ptr(), w.Ptr()+driver.DevicePtr(w.Size()))
	}
	a.Free(x) // a free block [1.5 MiB, 6 MiB), all of it mapped
	z := mustHit(t, a, d, 2*mib)
	if z.Ptr() != w.Ptr()+2*mib {
		t.Fatalf("2 MiB at offset %d B of the range, want 2 MiB (the second chunk)", z.Ptr()-w.Ptr())
	}
	a.Free(w)
	if err := a.Trim(); err != nil {
		t.Fatal(err)
	}
	if st := agrees(t, a, d); st.BytesReserved != 2*mib {
		t.Fatalf("after Trim %d B reserved, want the one chunk z uses", st.BytesReserved)
	}
	a.Free(z)
	closeClean(t, a, d)
}

// Freed neighbours merge across what would have been segment boundaries:
// two 12 MiB buffers (each a segment of its own without the option) make
// room for one 24 MiB buffer with no new mapping.
func TestExpandableReusesAcrossBoundaries(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	x := mustAlloc(t, a, 12*mib)
	y := mustAlloc(t, a, 12*mib)
	if y.Ptr() != x.Ptr()+12*mib {
		t.Fatalf("y at %#x, want right after x (%#x)", y.Ptr(), x.Ptr()+12*mib)
	}
	a.Free(x)
	a.Free(y)
	z := mustHit(t, a, d, 24*mib)
	if z.Ptr() != x.Ptr() {
		t.Fatalf("24 MiB at %#x; want x's address %#x", z.Ptr(), x.Ptr())
	}
	if st := agrees(t, a, d); st.PeakReserved != 24*mib {
		t.Fatalf("peak reserved %d, want 24 MiB", st.PeakReserved)
	}
	a.Free(z)
	closeClean(t, a, d)
}

// Trim unmaps the free chunks and keeps what live buffers use; Close
// unmaps the rest, leaked buffers' memory included, and releases both
// ranges.
func TestExpandableTrimAndCloseUnmap(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	var bufs []alloc.Buffer
	for _, n := range []int64{5 * mib, 100 << 10, 30 * mib, 7 * mib, 300 << 10} {
		b := mustAlloc(t, a, n)
		bufs = append(bufs, b)
	}
	for _, i := range []int{0, 2, 4} {
		a.Free(bufs[i])
	}
	before := agrees(t, a, d)
	if err := a.Trim(); err != nil {
		t.Fatal(err)
	}
	st := agrees(t, a, d)
	// Left: 100 KiB in the small range (one chunk), 7 MiB in the large
	// one, which sits after the 30 MiB freed: 4 chunks at most. What stays
	// cached is the free part of the chunks the two live buffers use:
	// under a chunk beside each.
	if st.BytesReserved > 2*mib+8*mib || st.BytesReserved >= before.BytesReserved || st.BytesCached >= 2*2*mib {
		t.Fatalf("after Trim: %d B reserved (%d before), %d cached", st.BytesReserved, before.BytesReserved, st.BytesCached)
	}
	if err := a.Close(); !errors.Is(err, alloc.ErrLeaked) {
		t.Fatalf("Close with 2 live buffers = %v, want ErrLeaked", err)
	}
	if mapped, res := d.state(); mapped != 0 || res != 0 {
		t.Fatalf("after Close: %d B mapped, %d reservations", mapped, res)
	}
	if d.count("ReleaseAddress") != 2 {
		t.Fatalf("%d ReleaseAddress calls, want 2", d.count("ReleaseAddress"))
	}
}

// Close during another allocator's Global-mode capture leaves the
// unmapping, with the rest of its unsafe cleanup, until the capture ends.
func TestExpandableCloseDefersUnmapping(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	other, err := alloc.New(d, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b, _ := a.Alloc(3 * mib)
	a.Free(b)
	if err := other.BeginCapture(alloc.Global); err != nil {
		t.Fatal(err)
	}
	calls := d.vmCalls()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.vmCalls() - calls; n != 0 {
		t.Fatalf("Close made %d virtual memory calls during a foreign Global capture", n)
	}
	if mapped, _ := d.state(); mapped != 4*mib {
		t.Fatalf("%d B mapped during the capture, want the 4 MiB Close left for later", mapped)
	}
	g, err := other.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	// The domain runs the deferred work on a goroutine of its own.
	deadline := time.Now().Add(10 * time.Second)
	for mapped, res := d.state(); mapped != 0 || res != 0; mapped, res = d.state() {
		if time.Now().After(deadline) {
			t.Fatalf("after the capture ended: %d B mapped, %d reservations", mapped, res)
		}
		time.Sleep(time.Millisecond)
	}
}

// Inside a capture an allocation stays a graph allocation: no virtual
// memory call is made while the capture records.
func TestExpandableNoMappingInCapture(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	warm, _ := a.Alloc(3 * mib)
	a.Free(warm)
	calls := d.vmCalls()
	if err := a.BeginCapture(alloc.Global); err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, a, 40*mib) // a miss outside a capture
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	graphSegs := 0
	for _, s := range snap.Segments {
		if s.Kind == "graph" && s.Ptr == b.Ptr() {
			graphSegs++
		}
	}
	if graphSegs != 1 || snap.Stats.CaptureAllocs != 1 {
		t.Fatalf("the allocation in capture is not a graph allocation: %+v", snap.Segments)
	}
	if err := a.Trim(); err == nil {
		t.Fatal("Trim during the capture succeeded")
	}
	g, err := a.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	if n := d.vmCalls() - calls; n != 0 {
		t.Fatalf("%d virtual memory calls during the capture", n)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	closeClean(t, a, d)
}

// While another allocator of the domain records a Global-mode capture,
// mapping is an unsafe call the guard forbids: a miss gets an ordinary
// stream-ordered segment instead, with no virtual memory call, and Trim
// gives it back once the capture is over.
func TestExpandableFallsBackUnderForeignGlobalCapture(t *testing.T) {
	d := newVMDriver(t, 0)
	var logs syncbuf.Buffer
	a, err := alloc.New(d, alloc.Options{ExpandableSegments: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	other, err := alloc.New(d, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	warm, _ := a.Alloc(3 * mib)
	calls := d.vmCalls()
	if err := other.BeginCapture(alloc.Global); err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, a, 12*mib)
	if n := d.vmCalls() - calls; n != 0 {
		t.Fatalf("%d virtual memory calls under a foreign Global capture", n)
	}
	snap, _ := a.Snapshot()
	var ordinary int64
	for _, s := range snap.Segments {
		if s.Kind == "large" && !s.Expandable {
			ordinary += s.Size
		}
	}
	if ordinary != 12*mib || snap.Stats.BytesReserved != 4*mib+12*mib {
		t.Fatalf("fallback: %d B in ordinary segments, %d B reserved; want 12 MiB and 16 MiB", ordinary, snap.Stats.BytesReserved)
	}
	a.Free(warm)
	if err := a.Trim(); err != nil { // skips the unmapping, and says so
		t.Fatal(err)
	}
	if n := d.vmCalls() - calls; n != 0 || !strings.Contains(logs.String(), "free chunks not unmapped") {
		t.Fatalf("Trim made %d virtual memory calls under a foreign Global capture; logged %q", n, logs.String())
	}
	warm, _ = a.Alloc(3 * mib)
	g, err := other.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	a.Free(b)
	a.Free(warm)
	if err := a.Trim(); err != nil {
		t.Fatal(err)
	}
	if st := agrees(t, a, d); st.BytesReserved != 0 {
		t.Fatalf("after Trim: %d B reserved", st.BytesReserved)
	}
	if _, err := a.Alloc(12 * mib); err != nil || d.vmCalls() == calls {
		t.Fatalf("after the capture: Alloc = %v with no mapping", err)
	}
	if err := a.Close(); !errors.Is(err, alloc.ErrLeaked) {
		t.Fatal(err)
	}
}

// Free chunks are unmapped to make room only when the stream is idle:
// memory freed on the stream may still be used by work queued before the
// free, and unmapping is not stream-ordered.
func TestExpandableUnmapsOnlyIdleStream(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	x, _ := a.Alloc(4 * mib)
	y, _ := a.Alloc(2 * mib)
	a.Free(x)
	if err := a.LaunchHostFunc(func() error { return nil }); err != nil { // queued: the stream is busy
		t.Fatal(err)
	}
	unmaps := d.count("UnmapMemory")
	z := mustAlloc(t, a, 6*mib) // does not fit x's place: maps 6 MiB past y
	if n := d.count("UnmapMemory") - unmaps; n != 0 {
		t.Fatalf("%d chunks unmapped while work was queued", n)
	}
	if err := a.Synchronize(); err != nil {
		t.Fatal(err)
	}
	a.Free(z)
	w := mustAlloc(t, a, 8*mib) // idle now: x's and z's free chunks go first
	if st := agrees(t, a, d); d.count("UnmapMemory") == unmaps || st.BytesReserved > 12*mib {
		t.Fatalf("idle stream: %d unmaps, %d B reserved", d.count("UnmapMemory")-unmaps, st.BytesReserved)
	}
	a.Free(y)
	a.Free(w)
	closeClean(t, a, d)
}

// Free chunks within the slack (expandSlack: reserved up to 1.04x the
// peak in use) stay mapped: a miss that maps one more chunk, still
// inside it, unmaps nothing, even with the stream idle. (Reading the
// peak from the wrong counter once made every idle miss unmap.)
func TestExpandableKeepsFreeChunksWithinSlack(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	x, _ := a.Alloc(50 * mib)
	y, _ := a.Alloc(50 * mib) // reserved 100 MiB, peak in use 100 MiB
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	maps, unmaps := d.count("MapMemory"), d.count("UnmapMemory")
	s := mustAlloc(t, a, 4<<10) // the small range's first chunk: 102 MiB reserved, within 1.04x
	if n := d.count("MapMemory") - maps; n != 1 {
		t.Fatalf("%d chunks mapped for the small request, want 1", n)
	}
	if n := d.count("UnmapMemory") - unmaps; n != 0 {
		t.Fatalf("%d free chunks unmapped with reserved within 1.04x the peak in use", n)
	}
	if st := agrees(t, a, d); st.BytesReserved != 102*mib || st.PeakInUse != 100*mib {
		t.Fatalf("reserved %d B, peak in use %d B", st.BytesReserved, st.PeakInUse)
	}
	a.Free(s)
	a.Free(y)
	closeClean(t, a, d)
}

// Out of memory, a miss waits for the stream, unmaps free chunks and
// retries; when even that does not make room it fails with
// ErrOutOfMemory and leaves everything as it was.
func TestExpandableOutOfMemory(t *testing.T) {
	d, a := newExpandableVM(t, 8*mib)
	x, _ := a.Alloc(4 * mib)
	y := mustAlloc(t, a, 2*mib)
	a.Free(x)
	ran := false
	if err := a.LaunchHostFunc(func() error { ran = true; return nil }); err != nil {
		t.Fatal(err) // the stream is busy: no unmapping before the map fails
	}
	z, err := a.Alloc(6 * mib)
	if err != nil {
		t.Fatalf("6 MiB with 4 MiB free of an 8 MiB device: %v", err)
	}
	if !ran {
		t.Fatal("free chunks unmapped before the queued work ran")
	}
	agrees(t, a, d)
	a.Free(z)
	if err := a.Trim(); err != nil { // only y's chunk stays mapped
		t.Fatal(err)
	}
	maps, unmaps := d.count("MapMemory"), d.count("UnmapMemory")
	before := agrees(t, a, d)
	_, err = a.Alloc(7 * mib) // 4 chunks past y: the 4th does not fit
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("7 MiB with 2 MiB live on an 8 MiB device = %v, want ErrOutOfMemory", err)
	}
	after := agrees(t, a, d)
	if after.BytesInUse != before.BytesInUse || after.BytesReserved != 2*mib || after.LiveBuffers != 1 ||
		d.count("MapMemory")-maps != 4 || d.count("UnmapMemory")-unmaps != 3 {
		t.Fatalf("failed Alloc changed the state: %v -> %v (%d maps, %d unmaps)", before, after, d.count("MapMemory")-maps, d.count("UnmapMemory")-unmaps)
	}
	if err := a.Free(y); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(8 * mib); err != nil {
		t.Fatalf("8 MiB on an empty 8 MiB device: %v", err)
	}
	if err := a.Close(); !errors.Is(err, alloc.ErrLeaked) {
		t.Fatal(err)
	}
	if mapped, res := d.state(); mapped != 0 || res != 0 {
		t.Fatalf("after Close: %d B mapped, %d reservations", mapped, res)
	}
}

// A snapshot shows each range as one segment: Size is the bytes mapped,
// its blocks lie at their offsets across Span, and nothing is drawn in
// the unmapped gaps.
func TestExpandableSnapshot(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	tr := newPoolTrace(3000, 64, 256, 64<<20, 1)
	live := make([]alloc.Buffer, tr.slots)
	tr.ops = tr.ops[:2000] // stop half way: buffers live, free blocks and holes between them
	if err := tr.run(a, live); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var mapped, inBlocks int64
	ranges := 0
	for _, s := range snap.Segments {
		if !s.Expandable {
			t.Fatalf("ordinary segment %+v", s)
		}
		ranges++
		mapped += s.Size
		var sum int64
		for _, b := range s.Blocks {
			if b.Offset < 0 || b.Offset+b.Size > s.Span {
				t.Fatalf("block %+v outside span %d", b, s.Span)
			}
			sum += b.Size
		}
		if sum > s.Size || s.Size > s.Span {
			t.Fatalf("segment %#x: blocks %d B, size %d, span %d", s.Ptr, sum, s.Size, s.Span)
		}
		inBlocks += sum
	}
	st := agrees(t, a, d)
	if ranges != 2 || mapped != st.BytesReserved {
		t.Fatalf("%d ranges mapping %d B; want 2 and %d", ranges, mapped, st.BytesReserved)
	}
	if by := snap.Bytes; by[memmap.BlockLive]+by[memmap.BlockCachedFragment]+by[memmap.BlockCachedSegment] != inBlocks {
		t.Fatalf("bytes by state %v, blocks %d B", by, inBlocks)
	}
	for _, b := range live {
		if b.Size() > 0 {
			a.Free(b)
		}
	}
	closeClean(t, a, d)
}

// Goroutines allocating and freeing on one allocator while others trim
// and snapshot it: the pool stays sound, the driver's mappings match the
// counters, and Close gives everything back.
func TestExpandableConcurrent(t *testing.T) {
	d, a := newExpandableVM(t, 256*mib)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0))
			var held []alloc.Buffer
			for i := 0; i < 2000; i++ {
				if len(held) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(held))
					if err := a.Free(held[k]); err != nil {
						t.Error(err)
						return
					}
					held[k] = held[len(held)-1]
					held = held[:len(held)-1]
					continue
				}
				n := int64(256) << rng.IntN(16) // 256 B .. 8 MiB
				b, err := a.Alloc(n + rng.Int64N(n))
				if errors.Is(err, alloc.ErrOutOfMemory) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				held = append(held, b)
			}
			for _, b := range held {
				a.Free(b)
			}
		}(uint64(g))
	}
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := a.Trim(); err != nil {
				t.Error(err)
				return
			}
			if _, err := a.Snapshot(); err != nil {
				t.Error(err)
				return
			}
			if err := a.CheckPool(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	side.Wait()
	if st := agrees(t, a, d); st.LiveBuffers != 0 {
		t.Fatalf("%d live buffers", st.LiveBuffers)
	}
	closeClean(t, a, d)
}

// vmDriverFor is the driver the expandable benchmarks run on: the cpu
// driver's own VirtualMemory when it has one, counted, else the fake.
func vmDriverFor(b *testing.B) (driver.Driver, func() (maps, unmaps int)) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 64 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if vm, ok := any(d).(driver.VirtualMemory); ok {
		c := &countedVM{Driver: d, vm: vm}
		return c, func() (int, int) { return int(c.maps.Load()), int(c.unmaps.Load()) }
	}
	f := newVMDriver(b, 0)
	return f, func() (int, int) { return f.count("MapMemory"), f.count("UnmapMemory") }
}

// countedVM counts a driver's map and unmap calls, keeping its other
// optional interfaces (the embedded *cpu.Driver's).
type countedVM struct {
	*cpu.Driver
	vm           driver.VirtualMemory
	maps, unmaps atomic.Int64
}

func (c *countedVM) MapGranularity() int64 { return c.vm.MapGranularity() }
func (c *countedVM) ReserveAddress(n int64) (driver.DevicePtr, error) {
	return c.vm.ReserveAddress(n)
}
func (c *countedVM) ReleaseAddress(p driver.DevicePtr, n int64) error {
	return c.vm.ReleaseAddress(p, n)
}
func (c *countedVM) MapMemory(p driver.DevicePtr, n int64) error {
	c.maps.Add(1)
	return c.vm.MapMemory(p, n)
}
func (c *countedVM) UnmapMemory(p driver.DevicePtr, n int64) error {
	c.unmaps.Add(1)
	return c.vm.UnmapMemory(p, n)
}

// BenchmarkExpandableTrace plays both fragmentation traces (the
// project's, and the inference mix: newInferenceTrace) with the ordinary
// pool and with expandable segments, on one driver. It reports time per
// trace op, the first run's peak reserved over peak in use, and the map
// and unmap calls per run once the pool is warm.
func BenchmarkExpandableTrace(b *testing.B) {
	for _, tc := range []struct {
		name string
		tr   poolTrace
	}{{"trace=project", newPoolTrace(100000, 64, 256, 64<<20, 1)}, {"trace=inference", newInferenceTrace(100000)}} {
		for _, exp := range []bool{false, true} {
			name := tc.name + "/segments=plain"
			if exp {
				name = tc.name + "/segments=expandable"
			}
			b.Run(name, func(b *testing.B) {
				d, calls := vmDriverFor(b)
				a, err := alloc.New(d, alloc.Options{ExpandableSegments: exp})
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				live := make([]alloc.Buffer, tc.tr.slots)
				if err := tc.tr.run(a, live); err != nil { // untimed: the first run fills the pool
					b.Fatal(err)
				}
				first := a.Stats()
				maps, unmaps := calls()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := tc.tr.run(a, live); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				st := a.Stats()
				m, u := calls()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tc.tr.ops)), "ns/trace-op")
				b.ReportMetric(float64(first.PeakReserved)/float64(first.PeakInUse), "reserved/in-use")
				b.ReportMetric(float64(m-maps)/float64(b.N), "maps/run")
				b.ReportMetric(float64(u-unmaps)/float64(b.N), "unmaps/run")
				b.ReportMetric(float64(st.DriverAllocs-first.DriverAllocs)/float64(b.N), "driver-allocs/run")
			})
		}
	}
}

// BenchmarkExpandableAllocFree is BenchmarkAllocFree's 64 KiB pair with
// expandable segments on: a pool hit, which expandable segments leave as
// it was.
func BenchmarkExpandableAllocFree(b *testing.B) {
	for _, exp := range []bool{false, true} {
		b.Run(fmt.Sprintf("expandable=%v", exp), func(b *testing.B) {
			d, _ := vmDriverFor(b)
			a, err := alloc.New(d, alloc.Options{ExpandableSegments: exp})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			benchPairs(b, a, 64<<10)
		})
	}
}

// On the cpu driver's own VirtualMemory (Linux): buffers of a range hold
// their bytes across chunk boundaries while the range is reshaped around
// them (frees, unmapping, remapping), and after Close the driver holds no
// device memory.
func TestExpandableOnCPUDriver(t *testing.T) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 256 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if vm, ok := any(d).(driver.VirtualMemory); !ok || vm.MapGranularity() == 0 {
		t.Skip("the cpu driver has no virtual memory here (Linux only)")
	}
	a := newExpandable(t, d)
	rng := rand.New(rand.NewPCG(4, 0))
	pat := make([]byte, 17*mib) // buffer contents: slices of it at an offset of their own
	for i := range pat {
		pat[i] = byte(i * 7)
	}
	type held struct {
		b    alloc.Buffer
		data []byte
	}
	var live []held
	check := func(h held) {
		t.Helper()
		got := make([]byte, h.b.Size())
		if err := a.Download(got, h.b, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, h.data) {
			t.Fatalf("buffer %#x+%d lost its bytes", h.b.Ptr(), h.b.Size())
		}
	}
	for i := 0; i < 300; i++ {
		if len(live) > 0 && (len(live) > 12 || rng.IntN(2) == 0) {
			k := rng.IntN(len(live))
			check(live[k])
			if err := a.Free(live[k].b); err != nil {
				t.Fatal(err)
			}
			live = append(live[:k], live[k+1:]...)
			continue
		}
		n := int64(4<<10) << rng.IntN(12) // 4 KiB .. 8 MiB
		b := mustAlloc(t, a, n+rng.Int64N(n))
		off := rng.Int64N(mib)
		h := held{b, pat[off : off+b.Size()]}
		if err := a.Upload(b, 0, h.data); err != nil {
			t.Fatal(err)
		}
		live = append(live, h)
	}
	if err := a.CheckPool(); err != nil {
		t.Fatal(err)
	}
	for _, h := range live {
		check(h)
	}
	st := a.Stats()
	if st.DriverFrees == 0 {
		t.Fatalf("no chunk was unmapped while buffers lived: the range was never reshaped (%v)", st)
	}
	if u, err := d.Usage(); err != nil || u.Device != st.BytesReserved {
		t.Fatalf("driver holds %+v (%v), Stats.BytesReserved %d", u, err, st.BytesReserved)
	}
	if err := a.Close(); !errors.Is(err, alloc.ErrLeaked) && len(live) > 0 {
		t.Fatalf("Close with live buffers = %v", err)
	}
	if u, err := d.Usage(); err != nil || u.Device != 0 {
		t.Fatalf("after Close the driver holds %+v (%v)", u, err)
	}
}

// An IPC export (the symmetric heap's, through internal/allocipc) of
// memory in an expandable range is refused before the driver is asked:
// another process cannot open part of a reservation.
func TestExpandableRefusesExport(t *testing.T) {
	d, a := newExpandableVM(t, 0)
	b, _ := a.Alloc(3 * mib)
	s, _ := a.Alloc(4 << 10)
	view, err := a.Slice(b, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, buf := range []alloc.Buffer{b, s, view} {
		if _, err := allocipc.Export(a, buf); !errors.Is(err, driver.ErrNotExportable) {
			t.Fatalf("export of %#x = %v, want ErrNotExportable", buf.Ptr(), err)
		}
	}
	if d.ipc != 0 {
		t.Fatalf("%d IPC calls made for refused exports", d.ipc)
	}
	sync, err := a.AllocSync(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocipc.Export(a, sync); err != nil || d.ipc != 1 {
		t.Fatalf("export of an AllocSync buffer = %v (%d calls)", err, d.ipc)
	}
	for _, buf := range []alloc.Buffer{b, s, sync} {
		a.Free(buf)
	}
	closeClean(t, a, d)
}
