package symheap

import "errors"

var (
	// ErrCollectiveTimeout: a rank waited longer than Options.Timeout for
	// its peers (one replayed fewer times, or died). The heap is broken
	// from then on: every later collective on this rank fails with it.
	ErrCollectiveTimeout = errors.New("symheap: collective wait timed out")
	// ErrAllocMismatch: with Options.CheckAllocs, ranks allocated in the
	// heap in different sequences, so the same Tensor names different
	// bytes on different ranks.
	ErrAllocMismatch = errors.New("symheap: ranks allocated differently")
	// ErrHeapFull: an allocation does not fit in what is left of the heap.
	ErrHeapFull = errors.New("symheap: heap full")
	// ErrCollectiveMismatch: ranks met in different collectives (another
	// kind, algorithm, element type or count), or one rank ran collectives
	// the other did not, so their epochs diverged. Each arrival carries the
	// collective's signature next to its epoch, so both ranks find it at
	// the barrier where they meet, inside the collective, and name both
	// collectives and both ranks. The heap is broken from then on, as
	// after ErrCollectiveTimeout.
	ErrCollectiveMismatch = errors.New("symheap: ranks ran different collectives")
)

var (
	// ErrPeerOpen: a device heap could not be opened on every rank (a
	// rank failed to allocate or export its heap, or to open a peer's).
	// Opening is all or nothing: every rank closes what it opened and
	// fails with it, naming the rank and the cause.
	ErrPeerOpen = errors.New("symheap: peer heap not opened")
	// ErrExchangeTimeout: a rank did not reach an exchange round within
	// the timeout (it never started, died, or used another exchange).
	ErrExchangeTimeout = errors.New("symheap: handle exchange timed out")
	// ErrNotCoResident: a device heap's collectives cannot run because the
	// blocks of every rank on some device do not fit on it at once (their
	// barriers would wait for blocks that never start): the device's
	// resident blocks of the scarcest collective kernel, divided among
	// the ranks that share it, leave a rank no block. Every rank fails the
	// open with it, naming the device, the kernel and the numbers.
	ErrNotCoResident = errors.New("symheap: collectives' blocks cannot be co-resident")
	// ErrNoPeerAccess: two ranks of one process are on devices that
	// cannot reach each other's memory (no peer access between them), so
	// a device heap cannot span them. Every rank fails the open with it,
	// naming both devices.
	ErrNoPeerAccess = errors.New("symheap: devices without peer access")
	// ErrPeerClosed: a rank closed its device heap while this one still
	// runs collectives: they are refused before they touch any rank's
	// memory, and the heap is broken from then on.
	ErrPeerClosed = errors.New("symheap: a peer closed its heap")
)
