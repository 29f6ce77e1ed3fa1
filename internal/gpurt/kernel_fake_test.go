package gpurt_test

// The library's own kernels (internal/kernels) loaded and launched by each
// driver over its fake runtime, which runs the same source compiled for
// the host: module load, eager and captured launches, cross-rank
// barriers and their timeout, and the refusals.

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/ranks"
)

// kernelDriver opens a driver over a fresh build of the vendor's fake that
// can load the kernels, loads them, and returns it with the module and the
// fake's log, cleared.
func kernelDriver(t testing.TB, v *vendorCase, o opts) (gpuDriver, *driver.Module, *fakeLog) {
	t.Helper()
	lib := fakeLib(t, v)
	log := openFakeLog(t, lib)
	d, err := v.openKernels(lib, o)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	m, err := d.LoadModule(kernels.Image())
	require.NoError(t, err)
	log.Lines()
	return d, m, log
}

// newStream is a stream of d, for the test.
func newStream(t testing.TB, d gpuDriver) driver.Stream {
	t.Helper()
	s, err := d.CreateStream()
	require.NoError(t, err)
	return s
}

func floatBytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, x := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesFloats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// axpyInputs are x and y for round r: small integers and a = 2.5, so
// a*x + y is exact in float32 whether or not the compiler fuses it.
func axpyInputs(n, r int) (x, y []float32) {
	x, y = make([]float32, n), make([]float32, n)
	for i := range n {
		x[i], y[i] = float32(i+r), float32(1000*r-i)
	}
	return x, y
}

// axpyOnDevice puts round 1's x and y of n elements on d and returns
// them, y's device address, a fresh stream and the kernel's parameter
// (a = 2.5).
func axpyOnDevice(t *testing.T, d gpuDriver, n int) (xs, ys []float32, y driver.DevicePtr, s driver.Stream, args []byte) {
	t.Helper()
	xs, ys = axpyInputs(n, 1)
	x := malloc(t, d, 4*int64(n))
	y = malloc(t, d, 4*int64(n))
	fill(t, d, x, floatBytes(xs))
	fill(t, d, y, floatBytes(ys))
	s = newStream(t, d)
	args = (&kernels.AxpyArgs{X: uint64(x), Y: uint64(y), N: uint64(n), A: 2.5}).Encode(make([]byte, kernels.AxpySize))
	return xs, ys, y, s, args
}

func axpyWant(x, y []float32) []float32 {
	out := make([]float32, len(x))
	for i := range x {
		out[i] = 2.5*x[i] + y[i]
	}
	return out
}

func TestFakeLoadModule(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		lib := fakeLib(t, v)
		log := openFakeLog(t, lib)
		d, err := v.openKernels(lib, opts{})
		require.NoError(t, err)
		log.Lines()
		m, err := d.LoadModule(kernels.Image())
		require.NoError(t, err)
		require.Len(t, m.Kernels, len(kernels.Names))
		seen := map[driver.Kernel]bool{}
		for _, name := range kernels.Names {
			k := m.Kernels[name]
			require.NotZero(t, k, name)
			require.False(t, seen[k], "one handle per kernel")
			seen[k] = true
		}
		require.Equal(t, 64, m.MaxThreadsPerBlock, "the fake's default")
		require.Equal(t, 4, m.Multiprocessors, "the fake's default")
		require.Equal(t, uint64(1e9), m.TimerHz, "the fake's kernels count nanoseconds")
		lines := log.Lines()
		require.Len(t, find(lines, "ModuleGetFunction"), len(kernels.Names), "%v", lines)

		require.NoError(t, d.Close())
		lines = log.Lines()
		require.Len(t, find(lines, v.unload), 1, "Close unloads the module: %v", lines)
	})
}

// The elementwise kernel gives the right numbers, launched from the
// caller's goroutine on a stream.
func TestFakeKernelAxpy(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		const n = 100
		xs, ys, y, s, args := axpyOnDevice(t, d, n)
		log.Lines()
		require.NoError(t, d.LaunchKernel(m.Kernels[kernels.Axpy], 2, 16, args, s))
		require.NoError(t, d.StreamSynchronize(s))
		launches := find(log.Lines(), v.launch, "kernel=capalloc_axpy", "grid=2,1,1", "block=16,1,1", "shared=0")
		require.Len(t, launches, 1)
		require.Equal(t, axpyWant(xs, ys), bytesFloats(read(t, d, y, 4*n)))
	})
}

// A launch on a capturing stream is a kernel node: it does not run at
// capture, and every replay runs it on the inputs of the moment, with the
// parameter as it was at the launch (the driver copies it).
func TestFakeKernelInGraph(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		const n = 64
		hx := hostAlloc(t, d, 4*n)
		hy := hostAlloc(t, d, 4*n)
		hout := hostAlloc(t, d, 4*n)
		x := malloc(t, d, 4*n)
		y := malloc(t, d, 4*n)
		s := newStream(t, d)

		require.NoError(t, d.BeginCapture(s, alloc.Global))
		require.NoError(t, d.CopyHtoDAsync(x, hx, s))
		require.NoError(t, d.CopyHtoDAsync(y, hy, s))
		args := (&kernels.AxpyArgs{X: uint64(x), Y: uint64(y), N: n, A: 2.5}).Encode(make([]byte, kernels.AxpySize))
		require.NoError(t, d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 32, args, s))
		(&kernels.AxpyArgs{X: uint64(x), Y: uint64(y), N: n, A: 100}).Encode(args) // the node keeps its own copy
		require.NoError(t, d.CopyDtoHAsync(hout, y, s))
		g, err := d.EndCapture(s)
		require.NoError(t, err)
		e, err := d.GraphInstantiate(g, false)
		require.NoError(t, err)
		require.Equal(t, make([]byte, 4*n), hout, "nothing ran at capture")
		require.Len(t, find(log.Lines(), v.launch), 1)

		for r := 1; r <= 3; r++ {
			xs, ys := axpyInputs(n, r)
			copy(hx, floatBytes(xs))
			copy(hy, floatBytes(ys))
			require.NoError(t, d.GraphLaunch(e, s))
			require.NoError(t, d.StreamSynchronize(s))
			require.Equal(t, axpyWant(xs, ys), bytesFloats(hout), "replay %d", r)
		}
		require.Empty(t, find(log.Lines(), v.launch), "a replay makes no launch call")
		require.NoError(t, d.GraphExecDestroy(e))
		require.NoError(t, d.GraphDestroy(g))
	})
}

// heap is nranks allocations of one driver, each a zeroed signal pad and
// heapBytes after it, and the table of their addresses.
type heap struct {
	bases []driver.DevicePtr
	table driver.DevicePtr
}

const heapBytes = 4096

func newHeap(t *testing.T, d gpuDriver, nranks int) heap {
	t.Helper()
	h := heap{}
	tbl := make([]byte, 8*nranks)
	for r := range nranks {
		p := malloc(t, d, kernels.PadBytes+heapBytes)
		fill(t, d, p, make([]byte, kernels.PadBytes+heapBytes))
		h.bases = append(h.bases, p)
		binary.LittleEndian.PutUint64(tbl[8*r:], uint64(p))
	}
	var err error
	h.table, err = d.Malloc(int64(len(tbl)))
	require.NoError(t, err)
	fill(t, d, h.table, tbl)
	return h
}

// padError reads rank r's error word.
func (h heap) padError(t *testing.T, d gpuDriver, r int) kernels.PadError {
	t.Helper()
	return kernels.DecodePadError(read(t, d, h.bases[r], kernels.PadErrorBytes))
}

// epochs reads the epochs rank r's blocks finished: struct ca_pad's
// epoch_of[], after the failure record's 16 u32 (collectives.cu).
func (h heap) epochs(t *testing.T, d gpuDriver, r, blocks int) []uint32 {
	t.Helper()
	const at = kernels.PadEpochsOff
	b := read(t, d, h.bases[r], at+4*blocks)[at:]
	out := make([]uint32, blocks)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// within runs fn and fails the test if it has not returned in limit: a
// hang detector, not a timing claim.
func within(t *testing.T, limit time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("still running after %v", limit)
	}
}

// inParallel runs fn for each of n ranks at once (ranks.Each) and returns
// their errors once all are done, within a minute.
func inParallel(t *testing.T, n int, fn func(r int) error) []error {
	t.Helper()
	var errs []error
	within(t, time.Minute, func() { errs = ranks.Each(n, fn) })
	return errs
}

// Two ranks, each a goroutine with its own stream on one driver, meet at
// the device barrier again and again: every launch returns, no error is
// recorded, and the epochs advance once per barrier.
func TestFakeKernelBarrierTwoRanks(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, _ := kernelDriver(t, v, opts{})
		const nranks, grid, block, rounds = 2, 2, 4, 3
		h := newHeap(t, d, nranks)
		streams := []driver.Stream{newStream(t, d), newStream(t, d)}
		errs := inParallel(t, nranks, func(r int) error {
			c := kernels.Coll{Table: uint64(h.table), Rank: uint32(r), NRanks: nranks, TimeoutTicks: uint64(30 * time.Second)}
			params := c.Encode(make([]byte, kernels.CollSize))
			for range rounds {
				if err := d.LaunchKernel(m.Kernels[kernels.Barrier], grid, block, params, streams[r]); err != nil {
					return err
				}
				if err := d.StreamSynchronize(streams[r]); err != nil {
					return err
				}
			}
			return nil
		})
		for r := range nranks {
			require.NoError(t, errs[r], "rank %d", r)
			require.Equal(t, kernels.PadError{}, h.padError(t, d, r), "rank %d", r)
			require.Equal(t, []uint32{rounds, rounds}, h.epochs(t, d, r, grid), "rank %d: one epoch per barrier and block", r)
		}
	})
}

// Two ranks whose barriers carry different signatures, or whose epochs
// diverged (rank 0's moved 5 ahead in its pad), both record the mismatch
// at once, well before the timeout: in their own record (ErrMismatch: both
// signatures, both epochs as read), or, for a block that saw the peer
// break first, as the cause of ErrPeerBroken copied from the peer's.
func TestFakeKernelBarrierMismatch(t *testing.T) {
	sigA := kernels.Signature(kernels.KindAllGather, 0, 4096)
	sigB := kernels.Signature(kernels.KindReduceScatter, kernels.F32, 1024)
	for _, c := range []struct {
		name  string
		sigs  [2]uint32
		ahead uint32 // rank 0's epochs moved ahead by this
	}{{"signatures", [2]uint32{sigA, sigB}, 0}, {"epochs", [2]uint32{sigA, sigA}, 5}} {
		t.Run(c.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, v *vendorCase) {
				d, m, _ := kernelDriver(t, v, opts{})
				const nranks, grid, block = 2, 2, 4
				h := newHeap(t, d, nranks)
				moved := make([]byte, 4*grid)
				for b := range grid {
					binary.LittleEndian.PutUint32(moved[4*b:], c.ahead)
				}
				fill(t, d, h.bases[0]+kernels.PadEpochsOff, moved)
				streams := []driver.Stream{newStream(t, d), newStream(t, d)}
				errs := inParallel(t, nranks, func(r int) error {
					k := kernels.Coll{Table: uint64(h.table), Rank: uint32(r), NRanks: nranks, TimeoutTicks: uint64(time.Hour.Seconds() * float64(m.TimerHz)), Sig: c.sigs[r]}
					if err := d.LaunchKernel(m.Kernels[kernels.Barrier], grid, block, k.Encode(make([]byte, kernels.CollSize)), streams[r]); err != nil {
						return err
					}
					return d.StreamSynchronize(streams[r])
				})
				epoch := [2]uint32{c.ahead + 1, 1}
				for r := range nranks {
					require.NoError(t, errs[r], "rank %d", r)
					pe := h.padError(t, d, r)
					t.Logf("rank %d: %+v", r, pe)
					require.Equal(t, uint32(r), pe.Rank)
					require.Equal(t, uint32(1-r), pe.Peer)
					require.Equal(t, epoch[r], pe.Epoch)
					require.Equal(t, c.sigs[r], pe.Sig)
					cause := kernels.PadCause{Status: pe.Status, Rank: pe.Rank, Peer: pe.Peer, Epoch: pe.Epoch, PeerEpoch: pe.PeerEpoch, Sig: pe.Sig, PeerSig: pe.PeerSig}
					if pe.Status == kernels.ErrPeerBroken {
						cause = pe.Cause
					}
					require.Equal(t, uint32(kernels.ErrMismatch), cause.Status, "rank %d: %+v", r, pe)
					me := cause.Rank // the rank that found the mismatch
					require.Equal(t, 1-me, cause.Peer)
					require.Equal(t, epoch[me], cause.Epoch)
					require.Equal(t, c.sigs[me], cause.Sig)
					if c.ahead == 0 {
						require.Equal(t, epoch[1-me], cause.PeerEpoch, "the peer's arrival at the same epoch")
						require.Equal(t, c.sigs[1-me], cause.PeerSig, "with its signature")
					}
				}
			})
		})
	}
}

// A barrier whose peer never comes waits for the timeout, not forever,
// and records the timeout, its rank, peer and epoch in the pad.
func TestFakeKernelBarrierTimeout(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, _ := kernelDriver(t, v, opts{})
		h := newHeap(t, d, 2)
		s := newStream(t, d)
		const timeout = 50 * time.Millisecond
		c := kernels.Coll{Table: uint64(h.table), Rank: 0, NRanks: 2, TimeoutTicks: uint64(timeout.Seconds() * float64(m.TimerHz))}
		var err error
		start := time.Now()
		within(t, time.Minute, func() {
			err = d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, c.Encode(make([]byte, kernels.CollSize)), s)
		})
		elapsed := time.Since(start)
		require.NoError(t, err, "the kernel returns; the failure is in the pad")
		require.NoError(t, d.StreamSynchronize(s))
		require.GreaterOrEqual(t, elapsed, timeout, "it waited for the timeout, counted in the timer's ticks")
		t.Logf("timed out after %v (timeout %v)", elapsed, timeout)
		pe := h.padError(t, d, 0)
		require.Equal(t, uint32(kernels.ErrTimeout), pe.Status)
		require.Equal(t, uint32(0), pe.Rank)
		require.Equal(t, uint32(1), pe.Peer, "the rank that did not come")
		require.Equal(t, uint32(1), pe.Epoch)
		require.Less(t, pe.Block, uint32(2))
		require.Equal(t, kernels.PadError{}, h.padError(t, d, 1), "the missing rank's pad is untouched")
	})
}

// Bad launches are refused with typed errors before any call: nothing
// reaches the runtime's launch.
func TestFakeLaunchKernelRefusals(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		s := newStream(t, d)
		k := m.Kernels[kernels.Axpy]
		args := make([]byte, kernels.AxpySize)
		log.Lines()
		for _, c := range []struct {
			name        string
			k           driver.Kernel
			grid, block uint32
			params      []byte
			s           driver.Stream
		}{
			{"unknown kernel", 12345, 1, 1, args, s},
			{"grid 0", k, 0, 1, args, s},
			{"block 0", k, 1, 0, args, s},
			{"block over the device's maximum", k, 1, uint32(m.MaxThreadsPerBlock) + 1, args, s},
			{"2^32 threads", k, 1 << 26, 64, args, s},
			{"nil params", k, 1, 1, nil, s},
			{"params over the maximum", k, 1, 1, make([]byte, gpurt.MaxParamBytes+1), s},
			{"unknown stream", k, 1, 1, args, s + 8},
		} {
			err := d.LaunchKernel(c.k, c.grid, c.block, c.params, c.s)
			require.ErrorIs(t, err, alloc.ErrInvalidValue, c.name)
			require.Contains(t, err.Error(), v.name+": launch kernel", c.name)
		}
		_, err := d.LoadModule(driver.ModuleImage{Name: "empty", PTX: []byte("x"), Source: "x"})
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		_, err = d.LoadModule(driver.ModuleImage{Name: "twice", Kernels: []string{kernels.Axpy, kernels.Axpy}})
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Empty(t, log.Lines(), "no call was made")

		require.NoError(t, d.Close())
		log.Lines()
		require.ErrorIs(t, d.LaunchKernel(k, 1, 1, args, s), alloc.ErrClosed)
		_, err = d.LoadModule(kernels.Image())
		require.ErrorIs(t, err, alloc.ErrClosed)
		require.Empty(t, log.Lines(), "no call after Close")
	})
}

// An image without a kernel it names fails the load with the runtime's
// not-found code, and leaves nothing loaded.
func TestFakeLoadModuleMissingKernel(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _, log := kernelDriver(t, v, opts{})
		img := kernels.Image()
		img.Kernels = []string{kernels.Axpy, "capalloc_no_such_kernel"}
		_, err := d.LoadModule(img)
		require.ErrorIs(t, err, driver.ErrDriver)
		require.Contains(t, err.Error(), "kernel capalloc_no_such_kernel")
		code, ok := v.code(err)
		require.True(t, ok)
		require.Equal(t, 500, code, "not found, in both runtimes")
		require.Len(t, find(log.Lines(), v.unload), 1, "the half-loaded module is unloaded")
	})
}

// Loading is device-wide: during another allocator's Global capture it is
// refused before any call, the capture survives, and it works after.
func TestFakeLoadModuleDuringGlobalCaptureIsRefused(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		lib := fakeLib(t, v)
		d, err := v.openKernels(lib, opts{})
		require.NoError(t, err)
		defer d.Close()
		a, log := capturingAllocator(t, v, lib)

		_, err = d.LoadModule(kernels.Image())
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.Contains(t, err.Error(), "load module capalloc collectives")
		require.Empty(t, log.Lines(), "no driver call while the capture is active")

		endCapture(t, a, "the capture survived")
		_, err = d.LoadModule(kernels.Image())
		require.NoError(t, err)
	})
}

// A driver on device 1 launches from any goroutine: the launch makes its
// context (cuda) or device (hip) current on the calling thread, where the
// fake requires it, and puts the thread's own back.
func TestFakeLaunchOnSecondDevice(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"DEVICES", "2")
		d, m, log := kernelDriver(t, v, opts{Device: 1})
		const n = 16
		xs, ys, y, s, args := axpyOnDevice(t, d, n)
		log.Lines()
		var err error
		within(t, time.Minute, func() {
			err = d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s)
		})
		require.NoError(t, err)
		lines := log.Lines()
		var order []string
		for _, l := range lines {
			switch {
			case strings.Contains(l, v.setCurrent):
				order = append(order, "set")
			case strings.Contains(l, v.launch):
				require.Contains(t, l, "dev=1 ")
				order = append(order, "launch")
			}
		}
		require.Equal(t, []string{"set", "launch", "set"}, order, "made current, launched, put back: %v", lines)
		require.Equal(t, axpyWant(xs, ys), bytesFloats(read(t, d, y, 4*n)))
	})
}

// LaunchKernel allocates nothing (sync.Pool drops items at random under
// the race detector, so it is measured without it).
func TestFakeLaunchKernelAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race; run without it")
	}
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, _ := kernelDriver(t, v, opts{})
		x := malloc(t, d, 64)
		s := newStream(t, d)
		args := (&kernels.AxpyArgs{X: uint64(x), Y: uint64(x), N: 16, A: 1}).Encode(make([]byte, kernels.AxpySize))
		k := m.Kernels[kernels.Axpy]
		allocs := testing.AllocsPerRun(50, func() {
			if err := d.LaunchKernel(k, 1, 1, args, s); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs)
	})
}

// BenchmarkLaunchKernel is the launch path over each fake (axpy on 16
// floats, one thread): the driver's cost plus the fake's, which makes a
// worker thread per block from its pool. It says nothing of a GPU's
// launch time.
func BenchmarkLaunchKernel(b *testing.B) {
	for i := range vendors {
		v := &vendors[i]
		b.Run(v.name, func(b *testing.B) {
			d, m, _ := kernelDriver(b, v, opts{})
			x, err := d.Malloc(64)
			require.NoError(b, err)
			s, err := d.CreateStream()
			require.NoError(b, err)
			args := (&kernels.AxpyArgs{X: uint64(x), Y: uint64(x), N: 16, A: 1}).Encode(make([]byte, kernels.AxpySize))
			k := m.Kernels[kernels.Axpy]
			b.ReportAllocs()
			for b.Loop() {
				if err := d.LaunchKernel(k, 1, 1, args, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
