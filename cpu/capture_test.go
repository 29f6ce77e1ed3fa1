package cpu_test

import (
	"fmt"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// A replay must read the pinned input's current bytes and write the pinned
// output afresh: no snapshot at capture time.
func TestCaptureReplaysWithFreshHostData(t *testing.T) {
	for _, mode := range driver.Modes() {
		t.Run(mode.String(), func(t *testing.T) {
			d, s := newDriverStream(t, cpu.Options{})
			const n = 4096
			in, out := host(t, d, n), host(t, d, n)
			work := val[driver.DevicePtr](t)(d.Malloc(n))

			ok(t, d.BeginCapture(s, mode))
			wantStatus(t, d, s, driver.CaptureActive)
			ok(t, d.CopyHtoDAsync(work, in, s))
			tmp := val[driver.DevicePtr](t)(d.MallocAsync(n, s))
			ok(t, d.CopyDtoDAsync(tmp, work, n, s))
			ok(t, d.MemsetAsync(tmp, 0xAA, 8, s))
			ok(t, d.CopyDtoHAsync(out, tmp, s))
			ok(t, d.FreeAsync(tmp, s))
			g := val[driver.GraphHandle](t)(d.EndCapture(s))
			wantStatus(t, d, s, driver.CaptureNone)
			e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))

			ok(t, d.StreamSynchronize(s))
			wantBytes(t, out, 0) // recorded, not executed

			for round := byte(1); round <= 3; round++ {
				for i := range in {
					in[i] = round
				}
				clear(out)
				ok(t, d.GraphLaunch(e, s))
				wantBytes(t, out, 0) // a launch is lazy too
				ok(t, d.StreamSynchronize(s))
				wantBytes(t, out[:8], 0xAA)
				wantBytes(t, out[8:], round)
			}
			ok(t, d.GraphExecDestroy(e))
			ok(t, d.GraphDestroy(g))
			ok(t, d.Free(work))
			wantLive(t, d, 0)
		})
	}
}

func TestGraphAllocationsAreStableAndNotReused(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})

	ok(t, d.BeginCapture(s, alloc.Global))
	kept := val[driver.DevicePtr](t)(d.MallocAsync(1000, s))
	inner := val[driver.DevicePtr](t)(d.MallocAsync(2000, s))
	ok(t, d.MemsetAsync(inner, 3, 2000, s))
	ok(t, d.CopyDtoDAsync(kept, inner, 1000, s))
	ok(t, d.FreeAsync(inner, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, true))
	wantLive(t, d, 1024+2048)

	out := make([]byte, 1000)
	for range 3 {
		ok(t, d.MemsetAsync(kept, 0, 1000, s))
		ok(t, d.GraphLaunch(e, s))
		ok(t, d.CopyDtoH(out, kept, s))
		wantBytes(t, out, 3)
	}

	// Eager allocations never get an address the graph has baked in.
	for range 300 {
		p := val[driver.DevicePtr](t)(d.MallocAsync(64, s))
		q := val[driver.DevicePtr](t)(d.Malloc(64))
		for _, x := range []driver.DevicePtr{p, q} {
			if x == kept || x == inner {
				t.Fatalf("eager allocation got graph address %#x", x)
			}
		}
		ok(t, d.FreeAsync(p, s))
		ok(t, d.Free(q))
		ok(t, d.StreamSynchronize(s))
	}

	// The graph's internal memory is not the caller's to free.
	isErr(t, d.FreeAsync(inner, s), alloc.ErrInvalidValue)
	isErr(t, d.Free(inner), alloc.ErrInvalidValue)

	// Released only when neither the graph nor an instantiation can run.
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, 1024+2048)
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.StreamSynchronize(s))
	ok(t, d.GraphExecDestroy(e))
	wantLive(t, d, 1024)

	// What the graph allocated and did not free is the caller's until freed.
	wantFreedByCaller(t, d, s, kept, out, 3)
}

// Every call that would synchronize the capturing stream is refused with
// ErrCaptureIllegalOp and invalidates the capture, in every mode; EndCapture
// then fails and releases what the capture allocated.
func TestIllegalCallsInvalidateCapture(t *testing.T) {
	illegal := map[string]func(d *cpu.Driver, s driver.Stream, p driver.DevicePtr) error{
		"synchronize": func(d *cpu.Driver, s driver.Stream, _ driver.DevicePtr) error { return d.StreamSynchronize(s) },
		"query": func(d *cpu.Driver, s driver.Stream, _ driver.DevicePtr) error {
			_, err := d.StreamQuery(s)
			return err
		},
		"copy htod": func(d *cpu.Driver, s driver.Stream, p driver.DevicePtr) error {
			return d.CopyHtoD(p, make([]byte, 16), s)
		},
		"copy dtoh": func(d *cpu.Driver, s driver.Stream, p driver.DevicePtr) error {
			return d.CopyDtoH(make([]byte, 16), p, s)
		},
		"pageable htod async": func(d *cpu.Driver, s driver.Stream, p driver.DevicePtr) error {
			return d.CopyHtoDAsync(p, make([]byte, 16), s)
		},
		"pageable dtoh async": func(d *cpu.Driver, s driver.Stream, p driver.DevicePtr) error {
			return d.CopyDtoHAsync(make([]byte, 16), p, s)
		},
		"destroy stream": func(d *cpu.Driver, s driver.Stream, _ driver.DevicePtr) error { return d.DestroyStream(s) },
	}
	for name, call := range illegal {
		for _, mode := range driver.Modes() {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				d, s := newDriverStream(t, cpu.Options{})
				pre := val[driver.DevicePtr](t)(d.Malloc(256))

				ok(t, d.BeginCapture(s, mode))
				p := val[driver.DevicePtr](t)(d.MallocAsync(4096, s))
				ok(t, d.MemsetAsync(p, 1, 4096, s))
				wantLive(t, d, 256+4096)

				isErr(t, call(d, s, p), driver.ErrCaptureIllegalOp)
				wantStatus(t, d, s, driver.CaptureInvalidated)
				// A second illegal call says both things.
				isErr(t, d.StreamSynchronize(s), driver.ErrCaptureIllegalOp, alloc.ErrCaptureInvalidated)

				isErr(t, d.MemsetAsync(p, 2, 16, s), alloc.ErrCaptureInvalidated)
				isErr(t, d.MemsetAsync(pre, 2, 16, s), alloc.ErrCaptureInvalidated)
				_, err := d.MallocAsync(16, s)
				isErr(t, err, alloc.ErrCaptureInvalidated)
				isErr(t, d.FreeAsync(p, s), alloc.ErrCaptureInvalidated)

				g, err := d.EndCapture(s)
				isErr(t, err, alloc.ErrCaptureInvalidated)
				if g != 0 {
					t.Fatalf("invalidated capture returned graph %#x", g)
				}
				wantStatus(t, d, s, driver.CaptureNone)
				wantLive(t, d, 256)
				isErr(t, d.MemsetAsync(p, 1, 16, s), alloc.ErrInvalidValue)

				// The stream works normally again.
				ok(t, d.MemsetAsync(pre, 4, 256, s))
				ok(t, d.StreamSynchronize(s))
				_, err = d.EndCapture(s)
				isErr(t, err, alloc.ErrNotCapturing)
			})
		}
	}
}

// Device-wide unsafe calls are refused, and invalidate the capture, only
// while a Global-mode capture runs on the same device.
func TestDeviceWideCallsAndCaptureModes(t *testing.T) {
	unsafe := map[string]func(d *cpu.Driver, p driver.DevicePtr, h []byte) error{
		"malloc": func(d *cpu.Driver, _ driver.DevicePtr, _ []byte) error {
			q, err := d.Malloc(64)
			if err == nil {
				return d.Free(q)
			}
			return err
		},
		"free":       func(d *cpu.Driver, p driver.DevicePtr, _ []byte) error { return d.Free(p) },
		"host alloc": func(d *cpu.Driver, _ driver.DevicePtr, _ []byte) error { _, err := d.HostAlloc(64); return err },
		"host free":  func(d *cpu.Driver, _ driver.DevicePtr, h []byte) error { return d.HostFree(h) },
	}
	for name, call := range unsafe {
		for _, mode := range driver.Modes() {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				d := newDriver(t, cpu.Options{})
				other := newDriver(t, cpu.Options{})
				s := newStream(t, d)
				p := val[driver.DevicePtr](t)(d.Malloc(64))
				h := host(t, d, 64)
				ok(t, d.BeginCapture(s, mode))
				ok(t, d.MemsetAsync(p, 1, 64, s))

				err := call(d, p, h)
				if mode != alloc.Global {
					ok(t, err)
					wantStatus(t, d, s, driver.CaptureActive)
					_, err := d.MallocAsync(64, s)
					ok(t, err)
					g := val[driver.GraphHandle](t)(d.EndCapture(s))
					ok(t, d.GraphDestroy(g))
					return
				}
				isErr(t, err, driver.ErrCaptureIllegalOp)
				wantStatus(t, d, s, driver.CaptureInvalidated)
				// Still refused until the capture ends; another device is not affected.
				_, err = d.Malloc(64)
				isErr(t, err, driver.ErrCaptureIllegalOp)
				q := val[driver.DevicePtr](t)(other.Malloc(64))
				ok(t, other.Free(q))

				_, err = d.EndCapture(s)
				isErr(t, err, alloc.ErrCaptureInvalidated)
				ok(t, call(d, p, h)) // p and h were not released by the refused call
			})
		}
	}
}

func TestGlobalCaptureInvalidatesEveryGlobalCapture(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	g1, g2, tl := newStream(t, d), newStream(t, d), newStream(t, d)
	ok(t, d.BeginCapture(g1, alloc.Global))
	ok(t, d.BeginCapture(g2, alloc.Global))
	ok(t, d.BeginCapture(tl, alloc.ThreadLocal))
	_, err := d.Malloc(64)
	isErr(t, err, driver.ErrCaptureIllegalOp)
	wantStatus(t, d, g1, driver.CaptureInvalidated)
	wantStatus(t, d, g2, driver.CaptureInvalidated)
	wantStatus(t, d, tl, driver.CaptureActive)
	_, err = d.EndCapture(g1)
	isErr(t, err, alloc.ErrCaptureInvalidated)
	_, err = d.EndCapture(g2)
	isErr(t, err, alloc.ErrCaptureInvalidated)
	q := val[driver.DevicePtr](t)(d.Malloc(64)) // no Global capture left
	ok(t, d.Free(q))
	g := val[driver.GraphHandle](t)(d.EndCapture(tl))
	ok(t, d.GraphDestroy(g))
}

func TestFreeAsyncInCaptureOnlyForCaptureAllocations(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(256))
	ok(t, d.BeginCapture(s, alloc.Relaxed))
	isErr(t, d.FreeAsync(p, s), alloc.ErrInvalidValue)
	endInvalidated(t, d, s)
	ok(t, d.Free(p)) // untouched by the refused free

	// Use after a free node invalidates too.
	ok(t, d.BeginCapture(s, alloc.Relaxed))
	q := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	ok(t, d.FreeAsync(q, s))
	isErr(t, d.MemsetAsync(q, 1, 16, s), alloc.ErrInvalidValue)
	endInvalidated(t, d, s)
	wantLive(t, d, 0)

	// Capture memory cannot be freed from outside the capture.
	other := newStream(t, d)
	ok(t, d.BeginCapture(s, alloc.Relaxed))
	q = val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	isErr(t, d.FreeAsync(q, other), alloc.ErrInvalidValue)
	isErr(t, d.Free(q), alloc.ErrInvalidValue)
	wantStatus(t, d, s, driver.CaptureActive)
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	ok(t, d.GraphDestroy(g)) // never launched: q was never allocated, and is gone
	wantLive(t, d, 0)
	isErr(t, d.Free(q), alloc.ErrInvalidValue)
}

// An allocation the graph does not free lives, as in CUDA, from the launch
// that runs its allocation node until the caller frees it; its address stays
// the graph's for every launch.
func TestGraphAllocationLifetime(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	capture := func() (driver.GraphHandle, driver.DevicePtr) {
		ok(t, d.BeginCapture(s, alloc.Global))
		p := val[driver.DevicePtr](t)(d.MallocAsync(1000, s))
		ok(t, d.MemsetAsync(p, 8, 1000, s))
		return val[driver.GraphHandle](t)(d.EndCapture(s)), p
	}
	out := make([]byte, 1000)

	// Never launched: not the caller's to free; destroying releases it.
	g, p := capture()
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	isErr(t, d.FreeAsync(p, s), alloc.ErrInvalidValue)
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, 0)

	// Without autoFree, relaunching needs the previous allocation freed; the
	// free keeps the address reserved for the next launch.
	g, p = capture()
	e = val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.GraphLaunch(e, s))
	isErr(t, d.GraphLaunch(e, s), alloc.ErrInvalidValue)
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, 8)
	ok(t, d.FreeAsync(p, s))
	isErr(t, d.FreeAsync(p, s), alloc.ErrInvalidValue)
	wantLive(t, d, 1024)
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.StreamSynchronize(s))
	ok(t, d.Free(p))
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, 0)

	// Launched and not freed when the graph goes: the caller's until freed.
	g, p = capture()
	e = val[driver.GraphExec](t)(d.GraphInstantiate(g, true))
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.GraphLaunch(e, s)) // autoFree: the previous allocation is freed first
	ok(t, d.GraphDestroy(g))
	ok(t, d.GraphExecDestroy(e))
	wantLive(t, d, 1024)
	wantFreedByCaller(t, d, s, p, out, 8)
}

// cudaGraphLaunch into a capturing stream returns 900 and invalidates the
// capture in every mode (cmd/cudatruth, CUDA 13.0): the emulation does the
// same, and the graph still launches once the capture is over.
func TestGraphLaunchInCaptureIsRefused(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(64))
	out := host(t, d, 64)

	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.MemsetAsync(p, 6, 64, s))
	child := val[driver.GraphHandle](t)(d.EndCapture(s))
	ce := val[driver.GraphExec](t)(d.GraphInstantiate(child, false))

	for _, m := range driver.Modes() {
		ok(t, d.BeginCapture(s, m))
		isErr(t, d.GraphLaunch(ce, s), driver.ErrCaptureIllegalOp)
		endInvalidated(t, d, s)
	}

	ok(t, d.GraphLaunch(ce, s))
	ok(t, d.CopyDtoHAsync(out, p, s))
	ok(t, d.StreamSynchronize(s))
	wantBytes(t, out, 6)
}

// A synchronize or query of a stream that is not capturing is refused, and
// invalidates the capture, while a Global-mode capture is under way, for a
// caller in Global interaction mode only (cmd/cudatruth, CUDA 13.0).
func TestSyncOfOtherStreamDuringGlobalCapture(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	s, other := newStream(t, d), newStream(t, d)
	for _, m := range driver.Modes() {
		ok(t, d.BeginCapture(s, m))
		relaxed := d.WithInteractionMode(alloc.Relaxed)
		ok(t, relaxed.StreamSynchronize(other))
		_, err := relaxed.StreamQuery(other)
		ok(t, err)
		wantStatus(t, d, s, driver.CaptureActive)
		err = d.StreamSynchronize(other)
		if m == alloc.Global {
			isErr(t, err, driver.ErrCaptureIllegalOp)
			endInvalidated(t, d, s)
			continue
		}
		ok(t, err)
		_, err = d.StreamQuery(other)
		ok(t, err)
		g := val[driver.GraphHandle](t)(d.EndCapture(s))
		ok(t, d.GraphDestroy(g))
	}
}

func TestCaptureUnavailable(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{NoCapture: true})
	isErr(t, d.BeginCapture(s, alloc.Global), driver.ErrCaptureUnavailable)
	wantStatus(t, d, s, driver.CaptureNone)
	_, err := d.EndCapture(s)
	isErr(t, err, alloc.ErrNotCapturing)
}

// CUDA's rules for graphs with memory nodes: one instantiation at a time,
// and (like every graph) never launched into a capture.
func TestGraphWithMemoryNodes(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	ok(t, d.BeginCapture(s, alloc.Global))
	p := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	ok(t, d.MemsetAsync(p, 1, 256, s))
	ok(t, d.FreeAsync(p, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	_, err := d.GraphInstantiate(g, false)
	isErr(t, err, alloc.ErrInvalidValue)

	ok(t, d.BeginCapture(s, alloc.Global))
	isErr(t, d.GraphLaunch(e, s), driver.ErrCaptureIllegalOp)
	endInvalidated(t, d, s)

	ok(t, d.GraphExecDestroy(e))
	e = val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.StreamSynchronize(s))
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, 0)
}

// A graph replayed after memory it uses was freed reports the use at the
// next wait on the launch stream instead of writing to a reused address.
func TestReplayAfterFreeIsReported(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(256))
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.MemsetAsync(p, 1, 256, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.Free(p))
	q := val[driver.DevicePtr](t)(d.Malloc(256))
	ok(t, d.GraphLaunch(e, s))
	isErr(t, d.StreamSynchronize(s), alloc.ErrInvalidValue)
	out := make([]byte, 256)
	ok(t, d.CopyDtoH(out, q, s))
	wantBytes(t, out, 0)
}

// Destroying a graph with a launch still queued is fine, as in CUDA: its
// memory is released once the launch has run.
func TestDestroyGraphWithQueuedLaunch(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	ok(t, d.BeginCapture(s, alloc.Global))
	p := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	ok(t, d.MemsetAsync(p, 1, 256, s))
	ok(t, d.FreeAsync(p, s))
	g := val[driver.GraphHandle](t)(d.EndCapture(s))
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.GraphLaunch(e, s))
	ok(t, d.GraphExecDestroy(e))
	ok(t, d.GraphDestroy(g))
	wantLive(t, d, 256)
	ok(t, d.StreamSynchronize(s))
	wantLive(t, d, 0)
}

// A caller in ThreadLocal or Relaxed interaction mode (a thread that called
// cudaThreadExchangeStreamCaptureMode) may make device-wide calls while
// another stream holds a Global-mode capture.
func TestInteractionModeView(t *testing.T) {
	for _, m := range []alloc.CaptureMode{alloc.ThreadLocal, alloc.Relaxed} {
		t.Run(m.String(), func(t *testing.T) {
			d := newDriver(t, cpu.Options{})
			v := d.WithInteractionMode(m)
			s := newStream(t, d)
			ok(t, d.BeginCapture(s, alloc.Global))
			p := val[driver.DevicePtr](t)(v.Malloc(64))
			h := val[[]byte](t)(v.HostAlloc(64))
			ok(t, v.HostFree(h))
			ok(t, v.Free(p))
			wantStatus(t, d, s, driver.CaptureActive)
			_, err := d.WithInteractionMode(alloc.Global).Malloc(64)
			isErr(t, err, driver.ErrCaptureIllegalOp)
			endInvalidated(t, d, s)
			wantLive(t, d, 0)
		})
	}
}
