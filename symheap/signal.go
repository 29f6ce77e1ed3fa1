package symheap

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The signal pad: 32-bit words at the start of each rank's file. Only rank
// r writes its own arrive, hash and signature words; peers read them.
// waiters counts peers asleep on this rank's arrive word, so an arrival
// makes a wake-up call only when someone sleeps.
const (
	padArrive  = 0   // the last epoch this rank arrived at
	padWaiters = 64  // peers sleeping on padArrive (another cache line)
	padHash    = 128 // two slots, by epoch parity: allocation hash at arrival
	padSig     = 192 // two slots, by epoch parity: the collective's signature at arrival
)

// arrival is what a collective's barriers carry besides the epoch: the
// allocation hash when it was launched (CheckAllocs) and its signature.
type arrival struct{ hash, sig uint32 }

// spins is how many times a wait polls before sleeping on the futex.
const spins = 200

func (h *Heap) word(p, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&h.views[p][off]))
}

// barrier arrives at this rank's next epoch and waits until every peer has
// arrived at it too (or later). The epoch lives in the pad, read at run
// time: nothing is frozen into a graph. at carries the allocation hash
// when the collective was launched (CheckAllocs) and its signature.
//
// The hash and the signature are written to the slot of e's parity before
// the epoch, and read from every peer after its epoch reached e: a peer is
// then at e or e+1 (it cannot reach e+2, which needs this rank at e+1), so
// its slot of e's parity still holds what it wrote at e. Every rank
// compares every peer's, so both ranks of a mismatch find it at the same
// epoch. A peer's epoch anywhere else than e-1, e or e+1 means the ranks'
// collectives diverged: ErrCollectiveMismatch at once, not a timeout.
func (h *Heap) barrier(at arrival) error {
	if err := h.Err(); err != nil {
		return err
	}
	own := h.word(h.rank, padArrive)
	e := own.Load() + 1
	if h.opts.CheckAllocs {
		h.word(h.rank, padHash+4*int(e&1)).Store(at.hash)
	}
	h.word(h.rank, padSig+4*int(e&1)).Store(at.sig)
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
	for p := range h.views {
		if got := h.word(p, padSig+4*int(e&1)).Load(); got != at.sig {
			return h.fail(mismatchError(h.rank, e, at.sig, p, e, got))
		}
	}
	if h.opts.CheckAllocs {
		for p := range h.views {
			if got := h.word(p, padHash+4*int(e&1)).Load(); got != at.hash {
				return h.fail(fmt.Errorf("%w: at epoch %d rank %d's allocation hash is %#x, rank %d's %#x", ErrAllocMismatch, e, p, got, h.rank, at.hash))
			}
		}
	}
	return nil
}

// waitFor waits until rank p's arrive word reaches e (wrap-safe), spinning
// briefly and then sleeping on the word; p at an epoch it cannot be at
// (see barrier) is ErrCollectiveMismatch.
func (h *Heap) waitFor(p int, e uint32, deadline time.Time) error {
	w := h.word(p, padArrive)
	for i := 0; ; i++ {
		v := w.Load() // acquire
		if d := int32(v - e); d == 0 || d == 1 {
			return nil
		} else if d != -1 {
			sig := h.word(h.rank, padSig+4*int(e&1)).Load()
			return mismatchError(h.rank, e, sig, p, v, h.word(p, padSig+4*int(v&1)).Load())
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
