package symheap

import (
	"github.com/capalloc/capalloc/internal/kernels"
)

// Point-to-point on the device heap: the same calls and counting as the
// host heap's (putsignal.go), as this library's kernels on the rank's
// stream (capalloc_put, capalloc_signal, capalloc_wait_signal), so a
// capture records them as kernel nodes and every replay runs them again.
// The slots are in the signal pad (kernels.PadSignalsOff): a signal adds
// to the peer's count with a system-scope release, a wait consumes from
// its own, keeping what it consumed in its pad at run time, so a graph
// replays without a reset. None of them meets a barrier: ranks may queue
// different numbers of them, and the collectives' epochs are untouched.
// A wait past the heap's timeout gives up on the device and Synchronize
// reports ErrCollectiveTimeout naming the slot and the counts; a wait
// that sees a peer close its heap stops with ErrPeerClosed.

// Put copies this rank's src into peer's dst (the same offsets name the
// same place on every rank), in stream order, spread over the rank's
// grid. The peer learns of it by a Signal queued after the Put.
func (h *DeviceHeap) Put(peer int, dst, src Tensor) error {
	if err := checkPeer("Put", peer, h.Ranks()); err != nil {
		return err
	}
	if err := h.bump.checkPair(dst, src); err != nil {
		return err
	}
	p := kernels.P2P{Coll: kernels.Coll{InOff: uint64(src.Off), OutOff: uint64(dst.Off), Count: uint64(src.Size)}, Peer: uint32(peer)}
	return h.p2p("Put", kernels.Put, p, (src.Size+15)/16)
}

// Signal adds value to peer's slot, in stream order: after the Puts
// queued before it have landed (a fence, then the add, which releases
// them to the peer's WaitSignal).
func (h *DeviceHeap) Signal(peer, slot int, value uint32) error {
	if err := checkPeer("Signal", peer, h.Ranks()); err != nil {
		return err
	}
	if err := checkSlot("Signal", slot); err != nil {
		return err
	}
	return h.p2p("Signal", kernels.Signal, kernels.P2P{Peer: uint32(peer), Slot: uint32(slot), Value: value}, 1)
}

// WaitSignal waits, in stream order, until this rank's slot has received
// value more than the waits on it before consumed, then consumes it: the
// peers' Puts signalled before are visible to the work queued after it.
// Past the heap's timeout the kernel gives up: Synchronize reports
// ErrCollectiveTimeout and the heap is broken.
func (h *DeviceHeap) WaitSignal(slot int, value uint32) error {
	if err := checkSlot("WaitSignal", slot); err != nil {
		return err
	}
	return h.p2p("WaitSignal", kernels.WaitSignal, kernels.P2P{Slot: uint32(slot), Value: value}, 1)
}

// p2p launches point-to-point kernel name with p (completed with the
// table, rank, ranks and timeout) on items work items of a thread each.
func (h *DeviceHeap) p2p(op, name string, p kernels.P2P, items int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.startLocked(op, &p.Coll); err != nil {
		return err
	}
	return h.launchLocked(op, name, p.Encode(make([]byte, kernels.P2PSize)), h.grid(items))
}
