package symheap_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/symheap"
)

// The aligned kernel variants over both fakes: picked where every operand
// and chunk is a whole number of 16-byte packs at a 16-aligned offset,
// the general kernels everywhere else (the result is the same), and a
// vector access at a misaligned address faults: forcing the aligned
// variant on a misaligned operand fails the launch with the runtime's
// misaligned-address code, as on a GPU, so the choice must be the host's.

// launched is the kernel of the last collective launch in the log.
func launched(t *testing.T, v *fakeVendor, log *gpurttest.Log) string {
	t.Helper()
	ls := gpurttest.Find(log.Lines(), v.launch+" kernel=")
	require.NotEmpty(t, ls)
	_, k, _ := strings.Cut(ls[len(ls)-1], " kernel=")
	k, _, _ = strings.Cut(k, " ")
	return k
}

func TestFakeAlignedVariantByOperands(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		const n = 2
		w, errs := openTopo(t, v, make([]int, n), 5*time.Second, nil)
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
			require.NotZero(t, symheap.MaxGridAligned(w.heaps[r]), "every fake allocation is 16-aligned")
		}
		// An all-reduce of count int32s at byte off of a 64 KiB region
		// (every rank the same), checked against the sum.
		region, err := w.heaps[0].Alloc(64 << 10)
		require.NoError(t, err)
		for _, h := range w.heaps[1:] {
			_, err := h.Alloc(64 << 10)
			require.NoError(t, err)
		}
		allReduce := func(off int64, count int, alg symheap.Algorithm) {
			t.Helper()
			x := symheap.Tensor{Off: region.Off + off, Size: 4 * int64(count)}
			w.must(t, func(r int) error {
				h := w.heaps[r]
				b := make([]byte, x.Size)
				for i := range count {
					binary.LittleEndian.PutUint32(b[4*i:], uint32(val(r, 0, i)))
				}
				if err := h.Allocator().Upload(h.Buffer(), symheap.SignalPadBytes+x.Off, b); err != nil {
					return err
				}
				if err := h.AllReduceWith(x, symheap.Int32, alg); err != nil {
					return err
				}
				if err := h.Synchronize(); err != nil {
					return err
				}
				if err := h.Allocator().Download(b, h.Buffer(), symheap.SignalPadBytes+x.Off); err != nil {
					return err
				}
				for i := range count {
					want := val(0, 0, i) + val(1, 0, i)
					require.Equal(t, want, int32(binary.LittleEndian.Uint32(b[4*i:])), "rank %d element %d", r, i)
				}
				return nil
			})
		}
		for _, alg := range []symheap.Algorithm{symheap.OneShot, symheap.TwoShot} {
			name := map[symheap.Algorithm]string{symheap.OneShot: "capalloc_allreduce_oneshot", symheap.TwoShot: "capalloc_allreduce_twoshot"}[alg]
			allReduce(0, 4096, alg)
			require.Equal(t, name+"_aligned", launched(t, v, log), "16-aligned, whole packs")
			allReduce(4, 4096, alg)
			require.Equal(t, name, launched(t, v, log), "4 bytes past a 16-byte boundary")
			allReduce(0, 4097, alg)
			require.Equal(t, name, launched(t, v, log), "a partial last pack")
		}

		// Forced onto a misaligned operand, the aligned variant faults at
		// its first vector access on every rank: the launch fails with
		// the runtime's misaligned-address code and the fake names the
		// 16-byte access.
		x := symheap.Tensor{Off: region.Off + 4, Size: 4 * 4096}
		for _, h := range w.heaps {
			symheap.ForceAligned(h, true)
		}
		errs = w.each(func(r int) error { return w.heaps[r].AllReduceWith(x, symheap.Int32, symheap.OneShot) })
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
			require.Contains(t, err.Error(), map[string]string{"cuda": "716", "hip": "719"}[v.name], "rank %d", r)
		}
		require.NotEmpty(t, gpurttest.Find(log.Lines(), "kernel fault", "misaligned", "of 16 B"))
		log.ResetFaults()
		for _, h := range w.heaps {
			symheap.ForceAligned(h, false)
		}
	})
}
