package gpurt_test

// The fakes fail a kernel's access where a GPU faults (issue 27, item 10;
// docs/device-collectives.md, "What the fakes enforce"): a misaligned
// word, memory that is not the device's (past an allocation, freed, host
// memory not pinned), and blocks that cannot be co-resident wait as on a
// GPU. A fault fails the launch with the runtime's code and ends it at
// once: no later access is made, and no spin wait runs on to its timeout.
// It loses the device, as on a GPU: every later call on it fails with the
// same code until the test resets the fake's faults.

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// misalignedCode is the code a vendor's fake fails a misaligned access
// with: cudaErrorMisalignedAddress; HIP has none (hipErrorLaunchFailure).
func misalignedCode(v *vendorCase) int {
	if v.name == "hip" {
		return 719
	}
	return 716
}

// requireCode checks that err is the vendor's typed error with code.
func requireCode(t *testing.T, v *vendorCase, err error, code int) {
	t.Helper()
	require.ErrorIs(t, err, driver.ErrDriver)
	got, ok := v.code(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, code, got, "%v", err)
}

// collParams encodes a collective's parameter over table.
func collParams(table driver.DevicePtr, rank, nranks int, timeout time.Duration) []byte {
	c := kernels.Coll{Table: uint64(table), Rank: uint32(rank), NRanks: uint32(nranks), TimeoutTicks: uint64(timeout)}
	return c.Encode(make([]byte, kernels.CollSize))
}

// A rank whose signal pad starts 2 bytes into its allocation: the
// barrier's 4-byte loads and stores of it are misaligned, which a GPU
// faults on (x86 would not).
func TestFakeKernelMisalignedAccessFails(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		h := newHeap(t, d, 1)
		tbl := make([]byte, 8)
		binary.LittleEndian.PutUint64(tbl, uint64(h.bases[0])+2)
		fill(t, d, h.table, tbl)
		s := newStream(t, d)
		var err error
		within(t, time.Minute, func() {
			err = d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, collParams(h.table, 0, 1, time.Minute), s)
		})
		requireCode(t, v, err, misalignedCode(v))
		require.Len(t, find(log.Lines(), "kernel fault", "misaligned", "of 4 B"), 1)
		log.ResetFaults()
		require.Equal(t, make([]byte, 64), read(t, d, h.bases[0], 64), "nothing was written")
	})
}

// Axpy's operands outside the device's memory: past the end of an
// allocation, freed, and host memory that is not pinned fail the launch
// with 700 (illegal address) and write nothing; pinned host memory is
// the device's to use.
func TestFakeKernelIllegalAddressFails(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		const n = 16
		x := malloc(t, d, 4*n)
		y := malloc(t, d, 4*n)
		freed := malloc(t, d, 4*n)
		require.NoError(t, d.Free(freed))
		xs, ys := axpyInputs(n, 1)
		fill(t, d, x, floatBytes(xs))
		fill(t, d, y, floatBytes(ys))
		pinned := hostAlloc(t, d, 4*n)
		copy(pinned, floatBytes(ys))
		unpinned := floatBytes(ys)
		s := newStream(t, d)
		addr := func(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }
		axpy := func(x, y uint64, elems int) error {
			args := (&kernels.AxpyArgs{X: x, Y: y, N: uint64(elems), A: 2.5}).Encode(make([]byte, kernels.AxpySize))
			var err error
			within(t, time.Minute, func() { err = d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s) })
			return err
		}
		log.Lines()
		requireCode(t, v, axpy(uint64(x), uint64(y), 2*n), 700)
		require.Len(t, find(log.Lines(), "kernel fault: code 700", "illegal load of 4 B"), 1, "past the end of x")
		log.ResetFaults()
		fill(t, d, y, floatBytes(ys)) // the threads before the fault stored theirs

		requireCode(t, v, axpy(uint64(freed), uint64(y), n), 700)
		log.ResetFaults()
		require.Equal(t, floatBytes(ys), read(t, d, y, 4*n), "freed x: nothing written")

		requireCode(t, v, axpy(uint64(x), addr(unpinned), n), 700)
		log.ResetFaults()
		require.Equal(t, floatBytes(ys), unpinned, "host memory not pinned: nothing written")
		runtime.KeepAlive(unpinned)

		require.NoError(t, axpy(uint64(x), addr(pinned), n), "pinned host memory")
		require.Equal(t, axpyWant(xs, ys), bytesFloats(pinned))
	})
}

// A fault ends the launch at once. Three ranks' table: rank 1's pad is a
// real allocation whose rank never comes, rank 2's is host memory that is
// not pinned. The barrier's store into rank 2's pad faults; the thread
// waiting for rank 1 stops waiting then, instead of at the timeout (ten
// minutes: within would fail first).
func TestFakeKernelFaultEndsSpinWaits(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		t.Cleanup(log.ResetFaults)
		h := newHeap(t, d, 2)
		host := make([]uint64, (kernels.PadBytes+heapBytes)/8)
		tbl := make([]byte, 24)
		binary.LittleEndian.PutUint64(tbl[0:], uint64(h.bases[0]))
		binary.LittleEndian.PutUint64(tbl[8:], uint64(h.bases[1]))
		binary.LittleEndian.PutUint64(tbl[16:], uint64(uintptr(unsafe.Pointer(&host[0]))))
		table := malloc(t, d, 24)
		fill(t, d, table, tbl)
		s := newStream(t, d)
		var err error
		within(t, time.Minute, func() {
			err = d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, collParams(table, 0, 3, 10*time.Minute), s)
		})
		requireCode(t, v, err, 700)
		require.Equal(t, make([]uint64, len(host)), host, "nothing was written")
		runtime.KeepAlive(host)
	})
}

// Residency: the fake device has one multiprocessor that holds two
// blocks of the barrier. Two ranks' barriers of two blocks each cannot
// be co-resident: the launch admitted first holds both places (a grid's
// blocks are dispatched together, as on a GPU) and its blocks wait for a
// peer that cannot start, until the timeout; then the other runs, finds
// its peer arrived, and passes. So exactly one rank records a timeout,
// whichever launched first and however late the other came. With room
// for four blocks both pass: their timeout only bounds a hang (the
// barrier passes as soon as the peer arrives), so a rank that starts late
// on a loaded machine still meets its peer.
func TestFakeKernelResidency(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"SMS", "1")
		d, m, _ := kernelDriver(t, v, opts{})
		for _, c := range []struct {
			blocksPerSM string
			timeout     time.Duration
			timeouts    int
		}{{"capalloc_barrier=2,*=8", 300 * time.Millisecond, 1}, {"4", 30 * time.Second, 0}} {
			t.Setenv(v.envPrefix+"BLOCKS_PER_SM", c.blocksPerSM)
			h := newHeap(t, d, 2)
			streams := []driver.Stream{newStream(t, d), newStream(t, d)}
			errs := inParallel(t, 2, func(r int) error {
				return d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, collParams(h.table, r, 2, c.timeout), streams[r])
			})
			require.Equal(t, c.timeouts, h.timeouts(t, d, errs), "BLOCKS_PER_SM=%s", c.blocksPerSM)
		}
	})
}

// timeouts counts the ranks of h whose barrier timed out, given each
// rank's launch error (none: a failure is recorded in the pad); any
// other failure fails the test.
func (h heap) timeouts(t *testing.T, d gpuDriver, errs []error) int {
	t.Helper()
	n := 0
	for r, err := range errs {
		require.NoError(t, err, "rank %d: the failure is in the pad", r)
		switch pe := h.padError(t, d, r); pe.Status {
		case kernels.ErrTimeout:
			n++
		case kernels.ErrNone:
		default:
			t.Fatalf("rank %d: %+v", r, pe)
		}
	}
	return n
}

// Launches are admitted grid by grid, in the order they ask, as a GPU's
// block scheduler dispatches one grid's blocks before the next one's. On
// the device of TestFakeKernelResidency (two barrier blocks) a lone
// rank's barrier holds both places until its timeout; two ranks' barriers
// of two blocks each ask meanwhile. When the places free, the launch that
// asked first takes both and times out waiting for the other, which then
// runs and passes: exactly one of them times out, whoever asked first. A
// scheduler that handed the freed places out block by block in the order
// the blocks asked would seat one block of each (the first launch's
// second block asks only once its first is seated) and both would pass,
// which a GPU does not do.
func TestFakeKernelResidencyWholeGrids(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"SMS", "1")
		t.Setenv(v.envPrefix+"BLOCKS_PER_SM", "capalloc_barrier=2,*=8")
		d, m, _ := kernelDriver(t, v, opts{})
		lone, h := newHeap(t, d, 2), newHeap(t, d, 2)
		s := newStream(t, d)
		held := make(chan error, 1)
		// Its hold lasts past the other two's asking (for the
		// block-by-block scheduler to show); what this test asserts
		// does not depend on it.
		go func() {
			held <- d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, collParams(lone.table, 0, 2, time.Second), s)
		}()
		// Both its blocks are seated once each stored its arrival in the
		// absent rank's pad (arrive[block][rank 0]).
		deadline := time.Now().Add(time.Minute)
		for {
			arrive := read(t, d, lone.bases[1]+kernels.PadArrivesOff, 8*(kernels.MaxRanks+1))
			if binary.LittleEndian.Uint64(arrive) != 0 && binary.LittleEndian.Uint64(arrive[8*kernels.MaxRanks:]) != 0 {
				break
			}
			require.False(t, time.Now().After(deadline), "the lone barrier's blocks never started")
			time.Sleep(time.Millisecond)
		}
		streams := []driver.Stream{newStream(t, d), newStream(t, d)}
		errs := inParallel(t, 2, func(r int) error {
			return d.LaunchKernel(m.Kernels[kernels.Barrier], 2, 4, collParams(h.table, r, 2, 300*time.Millisecond), streams[r])
		})
		require.NoError(t, <-held)
		require.EqualValues(t, kernels.ErrTimeout, lone.padError(t, d, 0).Status, "the lone rank waits for its peer until its timeout")
		require.Equal(t, 1, h.timeouts(t, d, errs), "the launch seated first waits for the other, which cannot be seated")
	})
}

// After a fault the device is lost: allocation, copies, synchronization
// stream creation and launches on it fail with the fault's code, as on a
// GPU; another device is not affected. The fake's reset makes it usable
// again.
func TestFakeKernelFaultLosesTheDevice(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"DEVICES", "2")
		d, m, log := kernelDriver(t, v, opts{})
		t.Cleanup(log.ResetFaults)
		other, err := v.openKernels("", opts{Device: 1})
		require.NoError(t, err)
		t.Cleanup(func() { other.Close() })
		x := malloc(t, d, 64)
		s := newStream(t, d)
		args := (&kernels.AxpyArgs{X: uint64(x), Y: uint64(x), N: 32, A: 1}).Encode(make([]byte, kernels.AxpySize))
		requireCode(t, v, d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s), 700)

		_, err = d.Malloc(64)
		requireCode(t, v, err, 700)
		requireCode(t, v, d.StreamSynchronize(s), 700)
		requireCode(t, v, d.CopyHtoD(x, make([]byte, 64), s), 700)
		args = (&kernels.AxpyArgs{X: uint64(x), Y: uint64(x), N: 16, A: 1}).Encode(make([]byte, kernels.AxpySize))
		requireCode(t, v, d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s), 700)
		require.NotEmpty(t, find(log.Lines(), "lost by a kernel fault: 700"))
		_, err = d.CreateStream()
		requireCode(t, v, err, 700)
		y, err := other.Malloc(64)
		require.NoError(t, err, "device 1 is not lost")
		require.NoError(t, other.Free(y))

		log.ResetFaults()
		require.NoError(t, d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s))
		require.NoError(t, d.StreamSynchronize(s))
	})
}
