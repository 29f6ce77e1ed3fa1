package symheap

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The signal pad: 32-bit words at the start of each rank's file. Only rank
// r writes its own arrive and hash words; peers read them. waiters counts
// peers asleep on this rank's arrive word, so an arrival makes a wake-up
// call only when someone sleeps.
const (
	padArrive  = 0   // the last epoch this rank arrived at
	padWaiters = 64  // peers sleeping on padArrive (another cache line)
	padHash    = 128 // two slots, by epoch parity: allocation hash at arrival
)

// spins is how many times a wait polls before sleeping on the futex.
const spins = 200

func (h *Heap) word(p, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&h.views[p][off]))
}

// barrier arrives at this rank's next epoch and waits until every peer has
// arrived at it too (or later). The epoch lives in the pad, read at run
// time: nothing is frozen into a graph. hash is the allocation hash when
// the collective was launched (CheckAllocs).
func (h *Heap) barrier(hash uint32) error {
	if err := h.Err(); err != nil {
		return err
	}
	own := h.word(h.rank, padArrive)
	e := own.Load() + 1
	if h.opts.CheckAllocs {
		// The slot by parity cannot be overwritten before every peer read
		// it: overwriting needs epoch e+2, past barrier e+1, which waits
		// for this rank.
		h.word(h.rank, padHash+4*int(e&1)).Store(hash)
	}
	own.Store(e) // release: peers' loads of e see everything written before
	if h.word(h.rank, padWaiters).Load() > 0 {
		futexWakeAll(own)
	}
	deadline := time.Now().Add(h.opts.Timeout)
	for p := range h.views {
		if p == h.rank {
			continue
		}
		if err := h.waitFor(p, e, deadline); err != nil {
			return h.fail(err)
		}
	}
	if h.opts.CheckAllocs {
		for p := range h.views {
			if got := h.word(p, padHash+4*int(e&1)).Load(); got != hash {
				return h.fail(fmt.Errorf("%w: at epoch %d rank %d's allocation hash is %#x, rank %d's %#x", ErrAllocMismatch, e, p, got, h.rank, hash))
			}
		}
	}
	return nil
}

// waitFor waits until rank p's arrive word reaches e (wrap-safe), spinning
// briefly and then sleeping on the word.
func (h *Heap) waitFor(p int, e uint32, deadline time.Time) error {
	w := h.word(p, padArrive)
	for i := 0; ; i++ {
		v := w.Load() // acquire
		if int32(v-e) >= 0 {
			return nil
		}
		if i < spins {
			if i >= spins/2 {
				if i%8 == 7 {
					osYield() // process ranks: let a peer process have the core
				} else {
					runtime.Gosched() // goroutine ranks share few cores: let the peer run
				}
			}
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: rank %d waited %v for rank %d to reach epoch %d (it is at %d): did it launch or replay fewer times?",
				ErrCollectiveTimeout, h.rank, h.opts.Timeout, p, e, v)
		}
		waiters := h.word(p, padWaiters)
		waiters.Add(1)
		futexSleep(w, v, min(left, 20*time.Millisecond))
		waiters.Add(^uint32(0))
	}
}
