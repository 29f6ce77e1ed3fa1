package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/symheap"
)

// Two goroutine ranks on one driver (engines share one driver per device),
// round after round: each queues an all-reduce, frees a scratch AllocSync
// buffer (a device-synchronizing call, which waits for every stream's
// work) and synchronizes. Nobody replays fewer times and nobody dies, so
// every round completes. A synchronous free must not run another rank's
// queued barrier in the freeing goroutine, ahead of the freeing rank's own
// work: both ranks would wait for each other until they timed out.
func (s *suite) ranksShareADriver(t *testing.T) {
	const n, rounds = 2, 20
	d := s.openDriver(t)
	w, ok := s.newHostWorldOn(t, n, 1<<16, 5*time.Second, false, func(int) driver.Driver { return d })
	if !ok {
		return
	}
	x := w.alloc(t, 4*elems)
	for k := range rounds {
		w.must(t, func(r int, h symheap.Collectives) error {
			a := h.Allocator()
			scratch, err := a.AllocSync(4096)
			if err != nil {
				return err
			}
			xs := w.host[r].Int32s(x)
			for i := range xs {
				xs[i] = val(r, k, i)
			}
			if err := h.AllReduce(x, symheap.Int32); err != nil {
				return errors.Join(err, a.Free(scratch))
			}
			if err := a.Free(scratch); err != nil {
				return fmt.Errorf("round %d: freeing the scratch buffer: %w", k, err)
			}
			if err := h.Synchronize(); err != nil {
				return fmt.Errorf("round %d: %w", k, err)
			}
			for i, got := range xs {
				if want := val(0, k, i) + val(1, k, i); got != want {
					return fmt.Errorf("round %d: rank %d: element %d is %d, want %d", k, r, i, got, want)
				}
			}
			return nil
		})
	}
}
