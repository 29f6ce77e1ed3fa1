package alloc_test

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// The per-P lane (alloc/shard.go) under -race: goroutines sharing one
// allocator, each with buffers of a few sizes, see only their own bytes,
// and when they are done the counters add up and every byte goes back.
func TestSharedAllocatorGoroutinesKeepTheirBytes(t *testing.T) {
	d, a := newCPUAllocator(t, 1<<30)
	const workers, iters = 4, 300
	sizes := []int64{256, 4 << 10, 64 << 10, 1 << 20}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := range iters {
					n := sizes[(w+i)%len(sizes)]
					b, err := a.Alloc(n)
					if err != nil {
						return err
					}
					want := bytes.Repeat([]byte{byte(w*31 + i)}, int(n))
					if err := a.Upload(b, 0, want); err != nil {
						return err
					}
					got := make([]byte, n)
					if err := a.Download(got, b, 0); err != nil {
						return err
					}
					if !bytes.Equal(got, want) {
						return errors.New("a buffer held another goroutine's bytes")
					}
					if err := a.Free(b); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	st := a.Stats()
	require.Zero(t, st.LiveBuffers, "%s", st)
	require.Zero(t, st.BytesInUse, "%s", st)
	require.Equal(t, st.Allocs, st.Frees, "%s", st)
	require.Equal(t, uint64(workers*iters), st.Allocs, "%s", st)
	require.Equal(t, st.BytesReserved, st.BytesCached, "every freed block is cached: %s", st)
	require.NoError(t, a.Trim())
	require.Zero(t, a.Stats().BytesReserved, "the shards' blocks merged back whole and were given back")
	require.NoError(t, a.Close())
	u, err := d.Usage()
	require.NoError(t, err)
	require.Zero(t, u.Device)
}

// Two goroutines freeing one buffer at once: one succeeds, the other gets
// ErrInvalidBuffer, whichever path (lane or lock) each takes; the counters
// count one free.
func TestConcurrentDoubleFreeFailsOnce(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	for range 500 {
		b, err := a.Alloc(64 << 10)
		require.NoError(t, err)
		var start sync.WaitGroup
		start.Add(1)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				start.Wait()
				errs <- a.Free(b)
			}()
		}
		start.Done()
		e1, e2 := <-errs, <-errs
		if e1 != nil {
			e1, e2 = e2, e1
		}
		require.NoError(t, e1)
		require.ErrorIs(t, e2, alloc.ErrInvalidBuffer)
	}
	st := a.Stats()
	require.Equal(t, st.Allocs, st.Frees, "%s", st)
	require.Zero(t, st.LiveBuffers)
	require.NoError(t, a.Close())
}

// A Memset racing a Free of its buffer is queued before the memory can be
// handed out again, or refused: it never lands in the next owner's bytes
// after the next owner wrote them.
func TestFreeRacingMemsetNeverReachesTheNextOwner(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	const n = 4096
	want := bytes.Repeat([]byte{0x55}, n)
	got := make([]byte, n)
	for i := range 2000 {
		b, err := a.Alloc(n)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			err := a.Memset(b, 0, 0xAA, n)
			if errors.Is(err, alloc.ErrInvalidBuffer) {
				err = nil // the Free won: refused, nothing queued
			}
			done <- err
		}()
		require.NoError(t, a.Free(b))
		next, err := a.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, a.Upload(next, 0, want))
		require.NoError(t, <-done)
		require.NoError(t, a.Download(got, next, 0))
		require.Equal(t, want, got, "iteration %d: the freed buffer's memset reached its next owner", i)
		require.NoError(t, a.Free(next))
	}
	require.NoError(t, a.Close())
}

// Close while goroutines allocate and free: each call succeeds or fails
// with ErrClosed, and Close gives every byte back, the lane's included.
func TestCloseRacingLaneCalls(t *testing.T) {
	d, a := newCPUAllocator(t, 1<<30)
	const workers = 4
	errs := make(chan error, workers)
	var started sync.WaitGroup
	started.Add(workers)
	for range workers {
		go func() {
			started.Done()
			for {
				b, err := a.Alloc(64 << 10)
				if err == nil {
					err = a.Free(b)
				}
				if err != nil {
					if errors.Is(err, alloc.ErrClosed) {
						err = nil
					}
					errs <- err
					return
				}
			}
		}()
	}
	started.Wait()
	time.Sleep(5 * time.Millisecond)
	if err := a.Close(); err != nil {
		require.ErrorIs(t, err, alloc.ErrLeaked, "a buffer allocated before Close and not yet freed")
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	u, err := d.Usage()
	require.NoError(t, err)
	require.Zero(t, u.Device, "Close gave back every segment")
}

// A capture begun while other goroutines allocate and free closes the
// lane (under -race: no data race between the two): what they allocate
// during it is recorded in it, and their Free of such a buffer is refused
// (it belongs to the graph, or was released with it), while every pooled
// buffer frees; in the end nothing is leaked.
func TestCaptureClosesTheLane(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	stop := make(chan struct{})
	type result struct {
		refused int
		err     error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			var r result
			defer func() { results <- r }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := a.Alloc(64 << 10)
				if err != nil {
					r.err = err
					return
				}
				if err := a.Free(b); errors.Is(err, alloc.ErrInvalidBuffer) {
					r.refused++ // a graph's: freed in the capture or released by Graph.Close
				} else if err != nil {
					r.err = err
					return
				}
			}
		}()
	}
	captured := 0
	for range 20 {
		require.NoError(t, a.BeginCapture(alloc.Global))
		time.Sleep(200 * time.Microsecond) // the others allocate meanwhile
		g, err := a.EndCapture()
		require.NoError(t, err)
		captured += g.CaptureAllocCount()
		require.NoError(t, g.Close())
	}
	close(stop)
	refused := 0
	for range 2 {
		r := <-results
		require.NoError(t, r.err)
		refused += r.refused
	}
	require.LessOrEqual(t, refused, captured, "only graph allocations are refused")
	st := a.Stats()
	require.Equal(t, uint64(captured), st.CaptureAllocs, "%s", st)
	require.Zero(t, st.LiveBuffers, "%s", st)
	require.NoError(t, a.Close(), "nothing leaked")
}

// PeakInUse is never below the true peak, and overstates it by at most
// the bytes one shard may owe per P (shardSlack, 1 MiB) however the
// goroutine moves between Ps.
func TestPeakInUseBounds(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	const n = 64 << 10
	var bs []alloc.Buffer
	for range 16 {
		b, err := a.Alloc(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
	for range 1000 { // pairs, below the peak: it must not move past the bound
		b, err := a.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
		runtime.Gosched()
	}
	st := a.Stats()
	require.Zero(t, st.BytesInUse)
	require.GreaterOrEqual(t, st.PeakInUse, int64(16*n))
	require.LessOrEqual(t, st.PeakInUse, int64(16*n)+int64(runtime.GOMAXPROCS(0))<<20)
	require.NoError(t, a.Close())
}

// A free the lane cached and an allocation of another size, which flushes
// the shards and publishes what they owed with its own bytes in one update
// (lane.flushOwedLocked): the bytes in use and their peak are exact, the
// freed bytes never counted with the new ones.
func TestPeakInUseExactAcrossFlush(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	const small, large = 256 << 10, 512 << 10 // owed within one shard's slack
	b, err := a.Alloc(small)
	require.NoError(t, err)
	require.NoError(t, a.Free(b)) // cached in a shard, its free owed
	b, err = a.Alloc(large)       // another size: the locked path
	require.NoError(t, err)
	st := a.Stats()
	require.Equal(t, int64(large), st.BytesInUse, "%s", st)
	require.Equal(t, int64(large), st.PeakInUse, "%s", st)
	require.NoError(t, a.Free(b))
	b, err = a.Alloc(small) // the other way round: the peak stays
	require.NoError(t, err)
	st = a.Stats()
	require.Equal(t, int64(small), st.BytesInUse, "%s", st)
	require.Equal(t, int64(large), st.PeakInUse, "%s", st)
	require.NoError(t, a.Free(b))
	require.NoError(t, a.Close())
}

// With every allocation sampled, two frees of one buffer racing each
// other, or a Free racing Close, read and clear the block's sample
// without a data race (-race; issue 27, item 2).
func TestProfiledFreeRaces(t *testing.T) {
	recordEvery(t, 1)
	_, a := newCPUAllocator(t, 1<<30)
	for range 300 {
		b, err := a.Alloc(4096)
		require.NoError(t, err)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- a.Free(b) }()
		}
		e1, e2 := <-errs, <-errs
		if e1 != nil {
			e1, e2 = e2, e1
		}
		require.NoError(t, e1)
		require.ErrorIs(t, e2, alloc.ErrInvalidBuffer)
	}
	require.NoError(t, a.Close())

	for range 100 {
		_, a := newCPUAllocator(t, 1<<30)
		b, err := a.Alloc(4096)
		require.NoError(t, err)
		freed := make(chan error, 1)
		go func() { freed <- a.Free(b) }()
		closeErr := a.Close()
		if err := <-freed; err != nil {
			require.ErrorIs(t, err, alloc.ErrClosed)
			require.ErrorIs(t, closeErr, alloc.ErrLeaked)
		} else {
			require.NoError(t, closeErr)
		}
	}
}

// Every Stats read is of one moment, while goroutines allocate and free
// on the lane and the locked path: the bytes in use are the live
// buffers' and fit in what is reserved (issue 27, item 3).
func TestStatsOfOneMoment(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	const n, workers, reads = 768 << 10, 3, 50000
	stop := churn(workers, func() error {
		var bs [2]alloc.Buffer
		for i := range bs {
			var err error
			if bs[i], err = a.Alloc(n); err != nil {
				return err
			}
		}
		for _, b := range bs {
			if err := a.Free(b); err != nil {
				return err
			}
		}
		return nil
	})
	var bad []string
	for range reads {
		st := a.Stats()
		if st.BytesInUse != int64(st.LiveBuffers)*n || st.BytesInUse+st.BytesCached > st.BytesReserved ||
			st.Allocs-st.Frees != uint64(st.LiveBuffers) || st.PeakInUse < st.BytesInUse {
			bad = append(bad, st.String())
		}
	}
	require.NoError(t, stop())
	require.Empty(t, bad, "%d of %d reads not of one moment", len(bad), reads)
	require.NoError(t, a.Close())
}

// churn runs step in a loop on each of workers goroutines until the
// returned stop is called; stop waits for them and returns the first
// error a step returned (a worker ends at its first error).
func churn(workers int, step func() error) (stop func() error) {
	done := make(chan struct{})
	errs := make(chan error, workers)
	for range workers {
		go func() {
			errs <- func() error {
				for {
					select {
					case <-done:
						return nil
					default:
					}
					if err := step(); err != nil {
						return err
					}
				}
			}()
		}()
	}
	return func() error {
		close(done)
		var first error
		for range workers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}
