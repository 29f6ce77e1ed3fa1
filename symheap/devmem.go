package symheap

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc"
)

// devMem is one rank's device allocation (its signal pad, then its heap)
// as the ranks of this process share it. A peer in the same process uses
// the address as it is, with no IPC mapping whose close the owner could
// wait for, so the memory lives until no rank of this process can touch
// it: the owner holds a reference until its heap's Close, every peer of
// this process that mapped it one until its own Close, and the last to
// let go frees it on the owner's allocator (docs/symmetric-heap.md,
// "Lifetime").
type devMem struct {
	id  uint64
	a   *alloc.Allocator
	buf alloc.Buffer

	// closed: its rank closed its heap. The peers of this process refuse
	// their collectives at once (ErrPeerClosed) instead of launching them.
	closed atomic.Bool

	mu   sync.Mutex
	refs int
}

var (
	devMems  sync.Map // id -> *devMem, while referenced
	devMemID atomic.Uint64
)

// newDevMem records buf, allocated on a, with its owner's reference; id
// names it to the peers of this process (the export message carries it).
func newDevMem(a *alloc.Allocator, buf alloc.Buffer) *devMem {
	m := &devMem{id: devMemID.Add(1), a: a, buf: buf, refs: 1}
	devMems.Store(m.id, m)
	return m
}

// acquireDevMem takes a reference on the allocation id of this process;
// false when it was freed already (its owner gave up before the peer
// mapped it).
func acquireDevMem(id uint64) (*devMem, bool) {
	v, ok := devMems.Load(id)
	if !ok {
		return nil, false
	}
	m := v.(*devMem)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs == 0 {
		return nil, false
	}
	m.refs++
	return m, true
}

// release drops a reference; the last frees the memory. An owner whose
// allocator was closed first lost the memory with it (the allocator's
// Close reported it, alloc.ErrLeaked): there is nothing left to free,
// and the peer that lets go last did nothing wrong.
func (m *devMem) release() error {
	m.mu.Lock()
	m.refs--
	last := m.refs == 0
	m.mu.Unlock()
	if !last {
		return nil
	}
	devMems.Delete(m.id)
	if err := m.a.Free(m.buf); err != nil && !errors.Is(err, alloc.ErrClosed) {
		return err
	}
	return nil
}

// setClosed records that m's rank closed its heap (nil: nothing to do),
// under m's lock, so a peer writing into m's memory in whileOpen either
// finishes first or skips it.
func (m *devMem) setClosed() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.closed.Store(true)
	m.mu.Unlock()
}

// whileOpen runs fn, which writes into m's memory, unless m's rank closed
// its heap (whose allocator may then release the memory at any time) or
// closed its allocator first (which released it already): under m's
// lock, so the owner's heap Close, and the allocator Close that follows
// it, wait until fn is done. (An allocator closed under its open heap
// while fn runs is the misuse Close documents: nothing can stop that.)
func (m *devMem) whileOpen(fn func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil
	}
	if _, err := m.a.CaptureStatus(); errors.Is(err, alloc.ErrClosed) {
		return nil
	}
	return fn()
}
