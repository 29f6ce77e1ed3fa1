package cpu_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

func TestInfo(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	if d.Name() != "cpu" {
		t.Fatalf("name %q", d.Name())
	}
	want := driver.DeviceInfo{Name: "cpu (emulated)", TotalMemory: 4 << 30, Alignment: 256, UnifiedMemory: true,
		CaptureSafety: driver.SafetyDocumented, Profile: "emulated"}
	if d.Info() != want {
		t.Fatalf("info %+v, want %+v", d.Info(), want)
	}
	gb := newDriver(t, cpu.Options{Profile: cpu.ProfileGB10})
	want = driver.DeviceInfo{Name: "cpu (emulated NVIDIA GB10)", TotalMemory: 4 << 30, Alignment: 256, UnifiedMemory: true,
		Integrated: true, PageableMemoryAccess: true, HostPageTables: true, ComputeCapability: "12.1", CaptureSafety: driver.SafetyStrict, Profile: "gb10"}
	if gb.Info() != want {
		t.Fatalf("gb10 info %+v, want %+v", gb.Info(), want)
	}
	if got := newDriver(t, cpu.Options{Profile: cpu.ProfileGB10, CaptureSafety: driver.SafetyDocumented}).Info().CaptureSafety; got != driver.SafetyDocumented {
		t.Fatalf("gb10 with capture safety documented: %v", got)
	}
	if _, err := cpu.New(cpu.Options{Profile: "h100"}); !errors.Is(err, alloc.ErrInvalidValue) {
		t.Fatalf("unknown profile: %v", err)
	}
	d2, err := cpu.Open()
	ok(t, err)
	defer d2.Close()
	if d.CaptureDomain() == d2.CaptureDomain() {
		t.Fatalf("capture domains collide: %q", d.CaptureDomain())
	}
	if _, err := cpu.New(cpu.Options{MemoryLimit: -1}); err == nil {
		t.Fatal("negative limit accepted")
	}
}

func TestStreamIsLazyAndOrdered(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	const n = 1024
	p := val[driver.DevicePtr](t)(d.MallocAsync(n, s))
	in, out := host(t, d, n), host(t, d, n)
	for i := range in {
		in[i] = 7
	}
	ok(t, d.CopyHtoDAsync(p, in, s))
	ok(t, d.MemsetAsync(p+16, 9, 16, s))
	ok(t, d.CopyDtoHAsync(out, p, s))
	wantBytes(t, out, 0) // nothing runs before the host waits

	ok(t, d.StreamSynchronize(s))
	wantBytes(t, out[:16], 7)
	wantBytes(t, out[16:32], 9)
	wantBytes(t, out[32:], 7)

	// StreamQuery makes the device progress, then reports done.
	ok(t, d.MemsetAsync(p, 1, n, s))
	ok(t, d.CopyDtoHAsync(out, p, s))
	wantBytes(t, out[16:32], 9) // still the previous result
	done := val[bool](t)(d.StreamQuery(s))
	if !done {
		t.Fatal("query after draining reported not done")
	}
	wantBytes(t, out, 1)
}

func TestBlockingCopiesAreOrderedOnTheStream(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.MallocAsync(512, s))
	ok(t, d.MemsetAsync(p, 5, 512, s))
	out := make([]byte, 512) // pageable
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, 5)

	ok(t, d.CopyHtoD(p+256, bytes.Repeat([]byte{3}, 256), s))
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out[:256], 5)
	wantBytes(t, out[256:], 3)
}

func TestPageableAsyncCopies(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.MallocAsync(64, s))

	// Pageable source: staged at the call, so reusing it at once is safe.
	src := bytes.Repeat([]byte{4}, 64)
	ok(t, d.CopyHtoDAsync(p, src, s))
	clear(src)
	// Pageable destination: the call returns once dst holds the bytes.
	dst := make([]byte, 64)
	ok(t, d.CopyDtoHAsync(dst, p, s))
	wantBytes(t, dst, 4)

	// A sub-slice of a pinned buffer is pinned: queued, not synchronous.
	h := host(t, d, 128)
	ok(t, d.CopyDtoHAsync(h[32:96], p, s))
	wantBytes(t, h, 0)
	ok(t, d.StreamSynchronize(s))
	wantBytes(t, h[32:96], 4)
}

func TestFreeAsyncIsStreamOrdered(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.MallocAsync(1000, s))
	wantLive(t, d, 1024) // rounded to the 256-byte alignment
	ok(t, d.FreeAsync(p, s))
	wantLive(t, d, 1024)
	ok(t, d.StreamSynchronize(s))
	wantLive(t, d, 0)
	if d.LiveAllocations() != 0 {
		t.Fatalf("live allocations %d", d.LiveAllocations())
	}
}

func TestUseAfterStreamOrderedFreeFailsAtSynchronize(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	ok(t, d.FreeAsync(p, s))
	ok(t, d.MemsetAsync(p, 1, 256, s)) // still allocated when enqueued
	isErr(t, d.StreamSynchronize(s), alloc.ErrInvalidValue)
	ok(t, d.StreamSynchronize(s)) // reported once
	isErr(t, d.MemsetAsync(p, 1, 256, s), alloc.ErrInvalidValue)
}

// A stream-ordered allocation reuses the memory of frees queued on its
// own stream at once, as a CUDA pool does, without running the queue; a
// synchronous allocation and another stream's do not: that memory is
// free for them once the frees have run.
func TestMallocAsyncReusesQueuedFrees(t *testing.T) {
	d := newDriver(t, cpu.Options{MemoryLimit: 1 << 20})
	s, other := newStream(t, d), newStream(t, d)
	gate := make(chan struct{})
	ok(t, d.LaunchHostFunc(s, func() error { <-gate; return nil })) // the queue does not run meanwhile
	for range 10 {
		p := val[driver.DevicePtr](t)(d.MallocAsync(1<<20, s))
		ok(t, d.FreeAsync(p, s))
	}
	wantLive(t, d, 1<<20) // the last free, not run, holds its bytes; the nine before it were reused
	_, err := d.Malloc(1 << 20)
	isErr(t, err, alloc.ErrOutOfMemory)
	_, err = d.MallocAsync(1<<20, other)
	isErr(t, err, alloc.ErrOutOfMemory)
	close(gate)
	ok(t, d.StreamSynchronize(s))
	wantLive(t, d, 0)
	p := val[driver.DevicePtr](t)(d.Malloc(1 << 20))
	ok(t, d.Free(p))
}

func TestDestroyStreamRunsQueuedWork(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	ok(t, d.FreeAsync(p, s))
	ok(t, d.DestroyStream(s))
	wantLive(t, d, 0)
	isErr(t, d.StreamSynchronize(s), alloc.ErrInvalidValue)
	isErr(t, d.DestroyStream(s), alloc.ErrInvalidValue)
}

func TestSynchronizeDoesNotBlockOtherStreams(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	busy, other := newStream(t, d), newStream(t, d)
	big := val[driver.DevicePtr](t)(d.MallocAsync(64<<20, busy))
	for range 16 {
		ok(t, d.MemsetAsync(big, 1, 64<<20, busy))
	}
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		close(started)
		done <- d.StreamSynchronize(busy)
	}()
	<-started
	p := val[driver.DevicePtr](t)(d.MallocAsync(256, other))
	ok(t, d.MemsetAsync(p, 2, 256, other))
	out := make([]byte, 256)
	ok(t, d.CopyDtoH(out, p, other))
	wantBytes(t, out, 2)
	ok(t, <-done)
}

// A device-synchronizing call (Free, HostFree) waits for every stream's
// queued work, and the streams run it concurrently, as a device does: two
// streams whose host functions wait for each other (a two-rank barrier)
// complete, whichever goroutine synchronizes. Drained one after another
// in the caller's goroutine, one rank's barrier would run there while the
// other's stayed queued behind it, and both would time out.
func TestDeviceSyncRunsStreamsConcurrently(t *testing.T) {
	for _, call := range []struct {
		name string
		make func(d *cpu.Driver) (release func() error)
	}{
		{"free", func(d *cpu.Driver) func() error {
			p := val[driver.DevicePtr](t)(d.Malloc(4096))
			return func() error { return d.Free(p) }
		}},
		{"host_free", func(d *cpu.Driver) func() error {
			b := host(t, d, 4096)
			return func() error { return d.HostFree(b) }
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			d := newDriver(t, cpu.Options{})
			streams := [2]driver.Stream{newStream(t, d), newStream(t, d)}
			for round := range 20 {
				var arrived [2]chan struct{}
				for r := range arrived {
					arrived[r] = make(chan struct{})
				}
				var release [2]func() error
				for r := range release {
					release[r] = call.make(d)
				}
				errs := make(chan error, 2)
				for r := range 2 {
					go func() {
						errs <- func() error {
							if err := d.LaunchHostFunc(streams[r], func() error {
								close(arrived[r])
								select {
								case <-arrived[1-r]:
									return nil
								case <-time.After(5 * time.Second):
									return fmt.Errorf("round %d: rank %d's peer never arrived", round, r)
								}
							}); err != nil {
								return err
							}
							if err := release[r](); err != nil {
								return err
							}
							return d.StreamSynchronize(streams[r])
						}()
					}()
				}
				for range 2 {
					ok(t, <-errs)
				}
			}
		})
	}
}

// A destroyed stream is unknown to every later call, whichever streams
// share its slot in the driver's stream cache (more streams than slots),
// and the live ones are still found.
func TestDestroyedStreamsAreUnknown(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(64))
	var live, gone []driver.Stream
	for i := range 150 {
		s := val[driver.Stream](t)(d.CreateStream())
		if i%3 == 0 {
			ok(t, d.DestroyStream(s))
			gone = append(gone, s)
		} else {
			live = append(live, s)
		}
	}
	for _, s := range gone {
		_, err := d.StreamCaptureStatus(s)
		isErr(t, err, alloc.ErrInvalidValue)
		isErr(t, d.MemsetAsync(p, 1, 64, s), alloc.ErrInvalidValue)
	}
	for _, s := range live {
		wantStatus(t, d, s, driver.CaptureNone)
		ok(t, d.MemsetAsync(p, 1, 64, s))
		ok(t, d.StreamSynchronize(s))
	}
}
