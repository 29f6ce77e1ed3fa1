package symheap

import (
	"fmt"
	"runtime"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/kernels"
)

// Point-to-point on the host heap: Put copies into a peer's heap, Signal
// adds to a peer's signal slot, WaitSignal waits on this rank's own. Each
// is a host function on the rank's stream, so a capture records it and a
// replay runs it again on the bytes and counts as they are then.
//
// A slot counts: Signal adds its value to the peer's slot, and each
// WaitSignal on a slot waits for its value more than the waits before it
// consumed, so a step captured once and replayed N times signals and waits
// N times without resetting anything (the barrier's epochs, kept the same
// way in the pad, at run time). Waits compare wrap-safe, and a wait past
// Options.Timeout is ErrCollectiveTimeout naming the rank, slot and
// counts: the heap is broken from then on, never hung.

// SignalSlots is the number of signal slots in each rank's pad.
const SignalSlots = 16

// Each slot has a cache line of the pad: the count peers add to, the
// sleepers on it, and what this rank's waits have consumed (written only by
// this rank). After the barrier's words (padSig's two slots end at 200).
const (
	padSlots      = 1024
	slotStride    = 64
	slotCount     = 0
	slotWaiters   = 4
	slotConsumed  = 8
	padSlotsLimit = padSlots + SignalSlots*slotStride
)

var (
	_ [padSize - padSlotsLimit]struct{} // the slots fit in the pad
	// both heaps have as many slots
	_ [SignalSlots - kernels.SignalSlots]struct{}
	_ [kernels.SignalSlots - SignalSlots]struct{}
)

func slotWord(slot, field int) int { return padSlots + slot*slotStride + field }

// checkPeer refuses a rank outside a group of ranks.
func checkPeer(what string, peer, ranks int) error {
	if peer < 0 || peer >= ranks {
		return fmt.Errorf("%w: symheap: %s: rank %d of %d", alloc.ErrInvalidValue, what, peer, ranks)
	}
	return nil
}

// signalTimeout is the failure of rank's wait on slot, which wanted a
// count of want and saw got, after timeout (both heaps).
func signalTimeout(rank int, timeout time.Duration, slot int, want, got uint32) error {
	return fmt.Errorf("%w: rank %d waited %v on signal slot %d for a count of %d (it is at %d): did a peer signal fewer times, or die?",
		ErrCollectiveTimeout, rank, timeout, slot, want, got)
}

func checkSlot(what string, slot int) error {
	if slot < 0 || slot >= SignalSlots {
		return fmt.Errorf("%w: symheap: %s: signal slot %d (0 to %d)", alloc.ErrInvalidValue, what, slot, SignalSlots-1)
	}
	return nil
}

// Put copies this rank's src into peer's dst (the same offsets name the
// same place on every rank), in stream order. The peer learns of it by a
// Signal queued after the Put.
func (h *Heap) Put(peer int, dst, src Tensor) error {
	if err := checkPeer("Put", peer, h.Ranks()); err != nil {
		return err
	}
	if err := h.bump.checkPair(dst, src); err != nil {
		return err
	}
	return h.launch("Put", 0, func(arrival) error {
		copy(h.peer(peer, dst), h.peer(h.rank, src))
		return nil
	})
}

// Signal adds value to peer's slot, in stream order: after the Puts queued
// before it have landed (their bytes are written before the add, which
// releases them to the peer's WaitSignal).
func (h *Heap) Signal(peer, slot int, value uint32) error {
	if err := checkPeer("Signal", peer, h.Ranks()); err != nil {
		return err
	}
	if err := checkSlot("Signal", slot); err != nil {
		return err
	}
	return h.launch("Signal", 0, func(arrival) error {
		w := h.word(peer, slotWord(slot, slotCount))
		w.Add(value)
		if h.word(peer, slotWord(slot, slotWaiters)).Load() > 0 {
			futexWakeAll(w)
		}
		return nil
	})
}

// WaitSignal waits, in stream order, until this rank's slot has received
// value more than the waits on it before consumed, then consumes it: the
// peers' Puts signalled before are visible after it. Past Options.Timeout
// it fails with ErrCollectiveTimeout and the heap is broken.
func (h *Heap) WaitSignal(slot int, value uint32) error {
	if err := checkSlot("WaitSignal", slot); err != nil {
		return err
	}
	return h.launch("WaitSignal", 0, func(arrival) error {
		if err := h.Err(); err != nil {
			return err
		}
		consumed := h.word(h.rank, slotWord(slot, slotConsumed))
		want := consumed.Load() + value
		if err := h.waitSlot(slot, want, time.Now().Add(h.opts.Timeout)); err != nil {
			return h.fail(err)
		}
		consumed.Store(want)
		return nil
	})
}

// waitSlot waits until this rank's slot count reaches want (wrap-safe),
// spinning briefly, then sleeping on the word.
func (h *Heap) waitSlot(slot int, want uint32, deadline time.Time) error {
	w := h.word(h.rank, slotWord(slot, slotCount))
	for i := 0; ; i++ {
		v := w.Load() // acquire: the signaller's Puts are visible
		if int32(v-want) >= 0 {
			return nil
		}
		if i < spins {
			if i >= spins/2 {
				runtime.Gosched()
			}
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return signalTimeout(h.rank, h.opts.Timeout, slot, want, v)
		}
		waiters := h.word(h.rank, slotWord(slot, slotWaiters))
		waiters.Add(1)
		futexSleep(w, v, min(left, 20*time.Millisecond))
		waiters.Add(^uint32(0))
	}
}
