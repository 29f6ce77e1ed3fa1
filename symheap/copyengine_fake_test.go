package symheap_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/symheap"
)

// The copy-engine variant over both fakes: a capture of a rank's
// all-gather records the barrier kernel, one device-to-device memcpy per
// rank (its own chunk first, then the next ranks'), and the barrier
// kernel again, each copy from the peer's heap address as this process
// maps it into this rank's output; the replays move the inputs as they
// are at each replay.
func TestFakeCopyEngineCapturesMemcpyNodes(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		const n, chunk = 3, 4096
		w := mustOpenTopo(t, v, n)
		var in, out symheap.Tensor
		for _, h := range w.heaps {
			var err error
			in, err = h.Alloc(chunk)
			require.NoError(t, err)
			out, err = h.Alloc(n * chunk)
			require.NoError(t, err)
		}
		log.Lines()
		graphs := make([]*alloc.Graph, n)
		for r, h := range w.heaps { // capture records; nothing runs
			var err error
			graphs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
				return h.AllGatherWith(in, out, symheap.CopyEngine)
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, graphs[r].Close()) })
			lines := log.Lines()
			require.Len(t, gpurttest.Find(lines, v.launch+" kernel="+kernels.Barrier), 2, "%v", lines)
			require.Len(t, gpurttest.Find(lines, v.launch+" kernel="), 2, "no collective kernel: %v", lines)
			copies := gpurttest.Find(lines, "MemcpyAsync", "kind=3")
			require.Len(t, copies, n, "%v", lines)
			for i, c := range copies {
				p := (r + i) % n
				src, err := w.heaps[r].Ptr(p, in)
				require.NoError(t, err)
				dst, err := w.heaps[r].Ptr(r, symheap.Tensor{Off: out.Off + int64(p)*chunk, Size: chunk})
				require.NoError(t, err)
				require.Contains(t, c, fmt.Sprintf("dst=%#x src=%#x n=%d", uint64(dst), uint64(src), chunk), "rank %d pulls rank %d's input", r, p)
			}
		}
		for k := range 3 {
			w.must(t, func(r int) error {
				if err := w.as[r].Memset(w.heaps[r].Buffer(), symheap.SignalPadBytes+in.Off, byte(10*k+r+1), chunk); err != nil {
					return err
				}
				if err := graphs[r].Launch(); err != nil {
					return err
				}
				return w.heaps[r].Synchronize()
			})
			for r, h := range w.heaps {
				got := make([]byte, n*chunk)
				require.NoError(t, w.as[r].Download(got, h.Buffer(), symheap.SignalPadBytes+out.Off))
				for p := range n {
					require.Equal(t, byte(10*k+p+1), got[p*chunk], "replay %d: rank %d's chunk %d", k, r, p)
					require.Equal(t, byte(10*k+p+1), got[(p+1)*chunk-1], "replay %d: rank %d's chunk %d", k, r, p)
				}
			}
		}
	})
}

// Auto picks the copy engines only where the recorded table says they
// were faster for the device kind, collective and rank count, from the
// recorded size on: with a synthetic row for the fake device's
// all-gather from 8 KiB on, an 8 KiB all-gather copies and a 4 KiB one
// runs the kernel; the all-to-all, without a row, keeps the kernel at
// every size; without the row (today's table) nothing copies.
func TestFakeAutoCopyEngineFollowsRecordedTable(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		open := func() *topoWorld { return mustOpenTopo(t, v, 2) }
		// run runs op on every rank on out.Size = size and says whether
		// it copied (a memcpy node between barrier kernels) or ran a kernel.
		run := func(w *topoWorld, op string, size int64) string {
			log.Lines()
			w.must(t, func(r int) error {
				h := w.heaps[r]
				if err := h.Reset(); err != nil {
					return err
				}
				in, err := h.Alloc(size)
				if err != nil {
					return err
				}
				out, err := h.Alloc(size)
				if err != nil {
					return err
				}
				if op == "allgather" {
					err = h.AllGather(symheap.Tensor{Off: in.Off, Size: size / 2}, out)
				} else {
					err = h.AllToAll(in, out)
				}
				if err != nil {
					return err
				}
				return h.Synchronize()
			})
			lines := log.Lines()
			if len(gpurttest.Find(lines, "MemcpyAsync", "kind=3")) > 0 {
				return "copy"
			}
			ks := gpurttest.Find(lines, v.launch+" kernel=")
			require.NotEmpty(t, ks)
			return "kernel"
		}
		w := open()
		require.EqualValues(t, symheap.NoCopyEngine, symheap.CopyEngineMin(w.heaps[0], "allgather"), "no recorded row")
		require.Equal(t, "kernel", run(w, "allgather", 64<<10))

		kind := symheap.DeviceKind(w.heaps[0].Allocator().Driver().Info().Name)
		defer symheap.SetRecordedCopyEngineMin([]symheap.CopyEngineRow{
			{Kind: kind, Op: "allgather", Ranks: 2, MinBytes: 8 << 10, Run: "test"},
			{Kind: kind, Op: "alltoall", Ranks: 3, MinBytes: 1, Run: "another rank count"},
		})()
		w = open()
		require.EqualValues(t, 8<<10, symheap.CopyEngineMin(w.heaps[0], "allgather"))
		require.EqualValues(t, symheap.NoCopyEngine, symheap.CopyEngineMin(w.heaps[0], "alltoall"))
		require.Equal(t, "copy", run(w, "allgather", 8<<10))
		require.Equal(t, "kernel", run(w, "allgather", 4<<10))
		require.Equal(t, "kernel", run(w, "alltoall", 64<<10))
	})
}

// mustOpenTopo opens n goroutine ranks on device 0 of the fake, every
// open succeeding.
func mustOpenTopo(t *testing.T, v *fakeVendor, n int) *topoWorld {
	t.Helper()
	return openTopoOK(t, v, make([]int, n), 5*time.Second, nil)
}
