package symheap

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// SignalPadBytes is the zeroed signal pad at the start of every rank's
// device allocation (the kernels' struct ca_pad: docs/device-collectives.md);
// the heap's bytes follow it.
const SignalPadBytes = kernels.PadBytes

// DeviceOptions configures OpenDevice.
type DeviceOptions struct {
	// Timeout bounds each exchange round (0: DefaultTimeout): past it a
	// missing rank is ErrExchangeTimeout. It also bounds every wait of the
	// heap's collectives on the device: past it the kernel gives up and
	// Synchronize reports ErrCollectiveTimeout.
	Timeout time.Duration
}

// DeviceHeap is one rank's symmetric heap in device memory: its own
// allocation (a signal pad, then the heap) and every peer's, mapped in
// this process, with the table of their base addresses on the device.
// Allocation is the same bump as Heap's: arithmetic, legal in a capture,
// the same offsets on every rank for the same sequence.
//
// Its collectives (Barrier, AllReduce, AllGather, ReduceScatter,
// AllToAll; devcollectives.go) are this library's kernels, loaded once per
// driver at OpenDevice, launched on the rank's stream; on a driver that
// runs no device code of ours they refuse with errors.ErrUnsupported
// (CollectivesRun). Copy moves bytes between any two ranks' heaps on the
// rank's stream, captured with the step.
type DeviceHeap struct {
	rank    int
	a       *alloc.Allocator
	x       Exchange
	timeout time.Duration
	bump    bump

	buf    alloc.Buffer       // this rank's allocation: pad, then heap
	mem    *devMem            // buf as this process's ranks share it (devmem.go)
	table  alloc.Buffer       // Ranks() little-endian uint64: bases as mapped here
	bases  []driver.DevicePtr // rank p's allocation as mapped here
	opened []bool             // bases[p] came from IPCOpenMemHandle
	locals []*devMem          // rank p's allocation, held: a peer of this process

	kern    *devKernels // the collectives, loaded at open (nil: kernErr says why)
	kernErr error
	maxGrid uint32 // blocks per launch, at most: every rank's co-resident limit (topology.go)
	// The aligned variants' limit (0: they are not used on this heap)
	// and, for tests, forceAligned: launch them whatever the operands.
	maxGridAligned uint32
	forceAligned   bool
	// Auto's crossover and copy-engine thresholds, agreed by every rank
	// at open (auto.go, copyengine.go).
	oneShotMax int64
	copyMin    [copyOps]int64

	mu     sync.Mutex
	closed bool
	err    error // sticky: the first collective failure Synchronize read
}

// DeviceRuns reports whether OpenDevice can run on d: the driver exports
// and opens IPC memory handles (driver.IPCMemory: cuda, hip). A wrapper
// that has an Inner() driver (alloctest.Spy) is looked through, since it
// forwards the methods whether or not the driver it wraps has them.
func DeviceRuns(d driver.Driver) bool {
	for {
		if _, ok := d.(driver.IPCMemory); !ok {
			return false
		}
		w, ok := d.(interface{ Inner() driver.Driver })
		if !ok {
			return true
		}
		d = w.Inner()
	}
}

// processToken tells this process from others in the exchange: a peer in
// the same process is not opened through IPC (the runtimes open handles
// "exported from another process"; HIP's tests check that opening one in
// the exporting process fails), its address is used as it is.
var processToken = sync.OnceValue(func() (t [16]byte) {
	_, _ = rand.Read(t[:]) // never fails (crypto/rand)
	return t
})

// Messages: a status byte, then the payload (ok) or the failure's text.
const (
	msgFailed byte = 0
	msgOK     byte = 1
)

func okMsg(payload []byte) []byte { return append([]byte{msgOK}, payload...) }

// failedMsg: msgFailed, the kind of failure (carriedKind: topology.go),
// the text.
func failedMsg(err error) []byte { return append([]byte{msgFailed, carriedKind(err)}, err.Error()...) }

// maxFailureText bounds how much of a peer's failure text an error
// carries (the rest is counted, not kept).
const maxFailureText = 4 << 10

// firstFailure returns the payloads, or an ErrPeerOpen naming the first
// rank whose message says it failed (wrapping the sentinel it carried),
// or whose status byte is neither.
func firstFailure(msgs [][]byte) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for p, m := range msgs {
		switch {
		case len(m) == 0:
			return nil, fmt.Errorf("%w: rank %d sent an empty message", ErrPeerOpen, p)
		case m[0] != msgOK && m[0] != msgFailed:
			return nil, fmt.Errorf("%w: rank %d sent a message of unknown status %d", ErrPeerOpen, p, m[0])
		case m[0] == msgFailed && len(m) < 2:
			return nil, fmt.Errorf("%w: rank %d failed without saying why", ErrPeerOpen, p)
		case m[0] == msgFailed:
			return nil, fmt.Errorf("%w: rank %d: %w", ErrPeerOpen, p, peerFailure(m[1], failureText(m[2:])))
		}
		out[p] = m[1:]
	}
	return out, nil
}

// failureText is a peer's failure text as an error carries it: without
// the ErrPeerOpen prefix its own error had, valid UTF-8, at most
// maxFailureText bytes of it.
func failureText(b []byte) string {
	s := strings.ToValidUTF8(string(b[:min(len(b), maxFailureText)]), "\ufffd")
	if len(b) > maxFailureText {
		s += fmt.Sprintf(" … (%d B more)", len(b)-maxFailureText)
	}
	return strings.TrimPrefix(s, ErrPeerOpen.Error()+": ")
}

// OpenDevice makes rank's heap of size bytes on a's device and maps every
// peer's, exchanging IPC handles through x (NewLocalExchange for
// goroutine ranks, FileExchange for processes). Every rank of x calls it
// with the same size. It allocates the heap (AllocSync: the runtimes
// export synchronous allocations), exports its handle, exchanges the
// handles, opens every peer's (a peer in the same process is used as it
// is), writes the table of base addresses to the device with one copy and
// one synchronize, and then exchanges once more, so no rank returns before
// every rank has opened every heap.
//
// It is all or nothing: if any rank fails, every rank closes what it
// opened, frees what it allocated and returns an error wrapping
// ErrPeerOpen that names the rank and the cause (this rank's own failure
// also wraps its own cause, such as alloc.ErrOutOfMemory); a rank
// missing past the timeout is ErrExchangeTimeout.
//
// Opening during a capture is refused with driver.ErrCaptureIllegalOp
// before any driver call but the capture status query, and a driver
// without IPC with an error wrapping errors.ErrUnsupported: both at once,
// without exchanging, so the peers fail with ErrExchangeTimeout. An
// exchange that saw a failure is spent: open again with a fresh one.
func OpenDevice(rank int, a *alloc.Allocator, x Exchange, size int64, opts DeviceOptions) (*DeviceHeap, error) {
	switch {
	case a == nil || x == nil:
		return nil, fmt.Errorf("%w: symheap: device heap needs an allocator and an exchange", alloc.ErrInvalidValue)
	case x.Ranks() < 1 || rank < 0 || rank >= x.Ranks():
		return nil, fmt.Errorf("%w: symheap: rank %d of %d", alloc.ErrInvalidValue, rank, x.Ranks())
	case size <= 0:
		return nil, fmt.Errorf("%w: symheap: device heap of %d B", alloc.ErrInvalidSize, size)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("%w: symheap: negative timeout %v (0 means DefaultTimeout)", alloc.ErrInvalidValue, opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	h := &DeviceHeap{rank: rank, a: a, x: x, timeout: opts.Timeout, bump: newBump(size, groupID(x)),
		bases: make([]driver.DevicePtr, x.Ranks()), opened: make([]bool, x.Ranks()), locals: make([]*devMem, x.Ranks())}
	if err := h.refusal(); err != nil {
		return nil, err // at once: the peers time out (ErrExchangeTimeout)
	}
	export, err := h.allocate()
	if err != nil {
		// The peers learn of it in this round instead of timing out.
		_, _ = x.AllGather(rank, failedMsg(err), h.timeout)
		return nil, errors.Join(h.peerOpen(err), h.free())
	}
	msgs, err := x.AllGather(rank, okMsg(export), h.timeout)
	if err == nil {
		msgs, err = firstFailure(msgs)
	}
	if err != nil { // nobody opened anything
		return nil, errors.Join(err, h.free())
	}
	err = h.openPeers(msgs, export)
	if err == nil {
		err = h.writeTable()
	}
	if err == nil {
		err = h.loadKernels()
	}
	// Confirm: nobody proceeds until every rank has opened every heap.
	// The round carries each rank's device, from which every rank takes
	// the same grid limit (topology.go).
	reply := okMsg(h.rankDevice().encode())
	if err != nil {
		reply = failedMsg(err)
	}
	msgs, xerr := x.AllGather(rank, reply, h.timeout)
	if xerr != nil {
		// A rank is missing: it will not reach a release round either.
		return nil, errors.Join(h.peerOpen(err), xerr, h.closePeers(), h.free())
	}
	if err == nil {
		if msgs, err = firstFailure(msgs); err == nil {
			err = h.settleGrid(msgs)
		}
	}
	if err == nil {
		return h, nil
	}
	return nil, errors.Join(h.peerOpen(err), h.release())
}

// peerOpen wraps this rank's failure in ErrPeerOpen with its rank (nil
// stays nil).
func (h *DeviceHeap) peerOpen(err error) error {
	if err == nil || errors.Is(err, ErrPeerOpen) {
		return err
	}
	return fmt.Errorf("%w: rank %d: %w", ErrPeerOpen, h.rank, err)
}

// refusal refuses, before any driver call but the capture status query,
// an open during a capture and a driver without IPC.
func (h *DeviceHeap) refusal() error {
	st, err := h.a.CaptureStatus()
	if err != nil {
		return err
	}
	if st != alloc.StateNone {
		return fmt.Errorf("%w: symheap: opening a device heap during a capture (state %s): open it before capturing", driver.ErrCaptureIllegalOp, st)
	}
	if d := h.a.Driver(); !DeviceRuns(d) {
		return fmt.Errorf("%w: symheap: backend %s has no IPC memory handles (a device heap needs driver.IPCMemory: cuda, hip)", errors.ErrUnsupported, d.Name())
	}
	return nil
}

// allocate allocates the heap and the table, zeroes the pad (queued) and
// exports the heap.
func (h *DeviceHeap) allocate() ([]byte, error) {
	a := h.a
	var err error
	if h.buf, err = a.AllocSync(SignalPadBytes + h.bump.size); err != nil {
		return nil, fmt.Errorf("symheap: device heap of rank %d: %w", h.rank, err)
	}
	h.mem = newDevMem(a, h.buf)
	if h.table, err = a.AllocSync(8 * int64(len(h.bases))); err != nil {
		return nil, fmt.Errorf("symheap: peer table of rank %d: %w", h.rank, err)
	}
	if err := a.Memset(h.buf, 0, 0, SignalPadBytes); err != nil {
		return nil, fmt.Errorf("symheap: signal pad of rank %d: %w", h.rank, err)
	}
	handle, err := exportHeap(a, h.buf)
	if err != nil {
		return nil, fmt.Errorf("symheap: exporting the heap of rank %d: %w", h.rank, err)
	}
	h.bases[h.rank] = h.buf.Ptr()
	e := heapExport{size: h.bump.size, token: processToken(), memID: h.mem.id, base: h.buf.Ptr(), device: h.deviceOrdinal(), handle: handle}
	if err := e.check(); err != nil { // this rank's driver sent what its peers would refuse
		return nil, fmt.Errorf("symheap: exporting the heap of rank %d: %w", h.rank, err)
	}
	return e.encode(), nil
}

// openPeers maps every peer's heap from its export message; for a peer
// of this process on another device it enables peer access to that
// device first (topology.go). Every message is decoded and checked
// (checkExports) before anything is enabled or mapped, so a bad one
// leaves nothing half-done; sent is this rank's own, as it sent it.
func (h *DeviceHeap) openPeers(msgs [][]byte, sent []byte) error {
	exports, err := h.checkExports(msgs, sent)
	if err != nil {
		return err
	}
	me, enabled := h.deviceOrdinal(), map[int]bool{}
	for p, e := range exports {
		if p == h.rank {
			continue
		}
		if e.token == processToken() {
			if dev := e.device; me >= 0 && dev >= 0 && dev != me && !enabled[dev] {
				if err := h.enablePeer(p, dev); err != nil {
					return err
				}
				enabled[dev] = true
			}
			pm, ok := acquireDevMem(e.memID)
			if !ok {
				return fmt.Errorf("%w: rank %d: rank %d's heap was released before this rank mapped it", ErrPeerOpen, h.rank, p)
			}
			h.bases[p], h.locals[p] = e.base, pm
			continue
		}
		ptr, err := openPeerHeap(h.a, e.handle)
		if err != nil {
			return fmt.Errorf("%w: rank %d opening rank %d's heap: %w", ErrPeerOpen, h.rank, p, err)
		}
		h.bases[p], h.opened[p] = ptr, true
	}
	return nil
}

// checkExports decodes every rank's export message and checks it against
// this rank's own (which must come back as sent): the same heap size and
// handle length; a peer that claims this process must name a live
// allocation of it, other than this rank's and another peer's, at the
// base address, of the heap's size and on the device ordinal it sends.
// That last check bounds the ordinal (the only one openPeers uses) by the
// devices this process really opened, before any peer access is enabled
// with it. A refusal is ErrPeerOpen naming both ranks and the field.
func (h *DeviceHeap) checkExports(msgs [][]byte, sent []byte) ([]heapExport, error) {
	refuse := func(p int, format string, args ...any) error {
		return fmt.Errorf("%w: rank %d: rank %d's export: %s", ErrPeerOpen, h.rank, p, fmt.Sprintf(format, args...))
	}
	if !bytes.Equal(msgs[h.rank], sent) {
		return nil, refuse(h.rank, "it came back from the exchange changed")
	}
	exports := make([]heapExport, len(msgs))
	for p, m := range msgs {
		e, err := decodeExport(m)
		if err != nil {
			return nil, refuse(p, "%v", err)
		}
		exports[p] = e
	}
	own := exports[h.rank]
	tok, ids := processToken(), map[uint64]int{own.memID: h.rank}
	for p, e := range exports {
		if p == h.rank {
			continue
		}
		if e.size != h.bump.size {
			return nil, refuse(p, "a heap of %d B, this rank's is %d B: every rank opens the same size", e.size, h.bump.size)
		}
		if len(e.handle) != len(own.handle) {
			return nil, refuse(p, "an IPC handle of %d B, this rank's driver's are %d B", len(e.handle), len(own.handle))
		}
		if e.token != tok {
			continue
		}
		if q, dup := ids[e.memID]; dup {
			return nil, refuse(p, "it claims allocation %d of this process, which is rank %d's", e.memID, q)
		}
		ids[e.memID] = p
		v, ok := devMems.Load(e.memID)
		if !ok {
			return nil, refuse(p, "it claims allocation %d of this process, which holds none such (released, or never made)", e.memID)
		}
		m := v.(*devMem)
		if want := m.buf.Ptr(); e.base != want || m.buf.Size() != SignalPadBytes+e.size {
			return nil, refuse(p, "allocation %d at %#x (%d B with the pad), which is at %#x (%d B)", e.memID, uint64(e.base), SignalPadBytes+e.size, uint64(want), m.buf.Size())
		}
		if want := ordinalOf(m.a.Driver()); e.device != want {
			return nil, refuse(p, "device ordinal %d for allocation %d, which is on device %d", e.device, e.memID, want)
		}
	}
	return exports, nil
}

// writeTable copies the bases to the device table (one copy) and waits
// for it and the pad's memset (one synchronize).
func (h *DeviceHeap) writeTable() error {
	b := make([]byte, 0, 8*len(h.bases))
	for _, p := range h.bases {
		b = binary.LittleEndian.AppendUint64(b, uint64(p))
	}
	if err := h.a.Upload(h.table, 0, b); err != nil {
		return fmt.Errorf("symheap: peer table of rank %d: %w", h.rank, err)
	}
	if err := h.a.Synchronize(); err != nil {
		return fmt.Errorf("symheap: peer table of rank %d: %w", h.rank, err)
	}
	return nil
}

// closePeers unmaps the peers' heaps this rank opened and lets go of
// those of this process.
func (h *DeviceHeap) closePeers() error {
	var errs []error
	for p, ok := range h.opened {
		if ok {
			errs = append(errs, closePeerHeap(h.a, h.bases[p]))
			h.opened[p] = false
		}
		if m := h.locals[p]; m != nil {
			errs = append(errs, m.release())
			h.locals[p] = nil
		}
		if p != h.rank {
			h.bases[p] = 0
		}
	}
	return errors.Join(errs...)
}

// free frees this rank's table and lets go of its heap, which the last
// rank of this process to hold it frees.
func (h *DeviceHeap) free() error {
	var errs []error
	if h.table.Size() > 0 {
		errs = append(errs, h.a.Free(h.table))
		h.table = alloc.Buffer{}
	}
	if h.mem != nil {
		errs = append(errs, h.mem.release())
		h.mem = nil
	}
	h.buf = alloc.Buffer{}
	h.bases[h.rank] = 0
	return errors.Join(errs...)
}

// peerClosedLocked is ErrPeerClosed when one of ranks is a peer of this
// process that closed its heap (its memory may be freed once this rank
// lets go of it too: Copy must not be recorded against it).
func (h *DeviceHeap) peerClosedLocked(ranks ...int) error {
	for _, p := range ranks {
		if m := h.locals[p]; m != nil && m.closed.Load() {
			return fmt.Errorf("%w: symheap: copy on rank %d: rank %d closed its heap", ErrPeerClosed, h.rank, p)
		}
	}
	return nil
}

// crossProcess reports whether a peer runs in another process (it mapped
// this rank's heap through IPC, as this rank mapped its).
func (h *DeviceHeap) crossProcess() bool {
	for _, ok := range h.opened {
		if ok {
			return true
		}
	}
	return false
}

// release unmaps the peers, waits until every rank has (a round of the
// exchange: the runtimes call freeing an exported allocation before the
// importers closed it undefined), then frees this rank's memory.
func (h *DeviceHeap) release() error {
	cerr := h.closePeers()
	_, xerr := h.x.AllGather(h.rank, okMsg(nil), h.timeout)
	return errors.Join(cerr, xerr, h.free())
}

// Close releases the heap. Every rank calls it (after closing the graphs
// that Copy between the heaps or hold copy-engine collectives, whose
// memcpy nodes hold peers' addresses; a graph's kernel collectives are
// safe, see below).
// It waits for the rank's queued work, then marks the heap closed in its
// own signal pad and in every peer's (closed[rank], a word of the pad no
// kernel writes): a collective of any rank that starts from then on,
// launched or replayed from a graph, stops on the device before it
// touches any rank's memory and breaks that rank's heap with
// ErrPeerClosed (a replay on this rank does nothing). A peer that runs no
// collective after it is not disturbed: the mark is not a failure until a
// kernel meets it. Close then unmaps the peers' heaps and waits in a
// release round (the exchange, at most the timeout) until every rank has
// closed, so no rank frees memory a peer's kernel may still read (a
// kernel that finished its last barrier may still be reading a peer's
// pad), and no importer maps memory its exporter freed (CUDA and HIP call
// that undefined); then it lets go of this rank's memory:
//
//   - ranks of this process share the memory's lifetime (devMem): it is
//     freed when the last of them let go of it;
//   - a missing rank is ErrExchangeTimeout, and its peers were marked: a
//     survivor's next collective is refused (ErrPeerClosed), on the host
//     before any launch in this process, and on the device otherwise.
//     Where a peer runs in another process, this rank's heap then stays
//     allocated rather than be freed under its mapping (its allocator's
//     Close reports it).
//
// Its allocator must still be open: closing the allocator first releases
// the heap's memory under the peers (the allocator's Close reports it as
// leaked); the heap's Close then still lets its peers go (those of this
// process marked on the host, the release round made, so no peer waits
// the timeout) and fails with alloc.ErrClosed.
// Refused during a capture (driver.ErrCaptureIllegalOp), the heap left
// open; a second Close fails with alloc.ErrClosed.
func (h *DeviceHeap) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: symheap: device heap of rank %d closed twice", alloc.ErrClosed, h.rank)
	}
	st, err := h.a.CaptureStatus()
	gone := errors.Is(err, alloc.ErrClosed)
	if err != nil && !gone {
		return err
	}
	if st != alloc.StateNone && !gone {
		return fmt.Errorf("%w: symheap: closing a device heap during a capture (state %s)", driver.ErrCaptureIllegalOp, st)
	}
	h.closed = true
	cross := h.crossProcess()
	var errs []error
	if gone {
		// The allocator released the memory already: there is no pad to
		// write the mark into, and no guarded call left to unmap the peers
		// of other processes with (the driver's Close does). What
		// closePeers and free report is that; the peers of this process
		// are marked on the host, and the release round still runs, so no
		// peer waits for this rank.
		h.mem.setClosed()
		errs = append(errs, fmt.Errorf("%w: symheap: device heap of rank %d: its allocator was closed before it, releasing the heap's memory under its peers (close the heap first)", alloc.ErrClosed, h.rank))
	} else {
		errs = append(errs, h.markClosed())
	}
	if err := h.closePeers(); !gone {
		errs = append(errs, err)
	}
	if _, err := h.x.AllGather(h.rank, okMsg(nil), h.timeout); err != nil {
		errs = append(errs, err)
		if cross {
			h.mem = nil // a peer of another process may still map it: kept
		}
	}
	if err := h.free(); !gone {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// markClosed waits for the rank's queued work (its collectives are done,
// or gave up), marks its devMem closed (the peers of this process refuse
// their collectives on the host from then on), and writes closed[rank] =
// 1 into this rank's pad and every peer's (one upload, then one copy each,
// as Copy reaches a peer), and waits for the copies. A peer of this
// process that closed already is skipped under its lock: its memory may
// be gone, and it runs nothing more.
func (h *DeviceHeap) markClosed() error {
	serr := h.a.Synchronize()
	h.mem.setClosed()
	off := int64(kernels.PadClosedOff + 4*h.rank)
	word := binary.LittleEndian.AppendUint32(nil, 1)
	if err := h.a.Upload(h.buf, off, word); err != nil {
		return errors.Join(serr, fmt.Errorf("symheap: marking the heap of rank %d closed: %w", h.rank, err))
	}
	d, me := h.a.Driver(), h.bases[h.rank]+driver.DevicePtr(off)
	var errs []error
	for p, b := range h.bases {
		if p == h.rank || b == 0 {
			continue
		}
		dst := b + driver.DevicePtr(off)
		copyTo := func() error {
			err := h.a.Enqueue("symheap close", []alloc.Buffer{h.buf}, func(s driver.Stream) error {
				return d.CopyDtoDAsync(dst, me, 4, s)
			})
			if err == nil {
				err = h.a.Synchronize()
			}
			return err
		}
		var err error
		if m := h.locals[p]; m != nil {
			err = m.whileOpen(copyTo)
		} else {
			err = copyTo()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("symheap: marking the heap of rank %d closed in rank %d's pad: %w", h.rank, p, err))
		}
	}
	return errors.Join(serr, errors.Join(errs...))
}

// Rank is this heap's rank; Ranks the number of ranks.
func (h *DeviceHeap) Rank() int  { return h.rank }
func (h *DeviceHeap) Ranks() int { return len(h.bases) }

// Size is the heap's size in bytes (without the signal pad).
func (h *DeviceHeap) Size() int64 { return h.bump.size }

// Allocator is the allocator whose device and stream the heap is on.
func (h *DeviceHeap) Allocator() *alloc.Allocator { return h.a }

// Alloc takes n bytes (aligned to Align) from the heap: a bump of the
// offset, host arithmetic only, legal during a capture. Every rank must
// allocate the same sizes in the same order.
func (h *DeviceHeap) Alloc(n int64) (Tensor, error) { return h.bump.alloc(n) }

// Reset frees the whole heap (refused during a capture, as Heap's).
func (h *DeviceHeap) Reset() error { return h.bump.reset(h.a) }

// Buffer is this rank's allocation, for the allocator's copies: the
// signal pad, then the heap, so t's bytes are at SignalPadBytes + t.Off.
func (h *DeviceHeap) Buffer() alloc.Buffer { return h.buf }

// PeerTable is the device array of Ranks() little-endian uint64: entry p
// is rank p's allocation (its signal pad, the heap SignalPadBytes after)
// as mapped in this process. It was written once, at OpenDevice.
func (h *DeviceHeap) PeerTable() alloc.Buffer { return h.table }

// Ptr is rank p's bytes of t as mapped in this process, for kernels.
func (h *DeviceHeap) Ptr(p int, t Tensor) (driver.DevicePtr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ptrLocked(p, t)
}

func (h *DeviceHeap) ptrLocked(p int, t Tensor) (driver.DevicePtr, error) {
	if h.closed {
		return 0, fmt.Errorf("%w: symheap: device heap of rank %d is closed", alloc.ErrClosed, h.rank)
	}
	if p < 0 || p >= len(h.bases) {
		return 0, fmt.Errorf("%w: symheap: rank %d of %d", alloc.ErrInvalidValue, p, len(h.bases))
	}
	if err := h.bump.check(t); err != nil {
		return 0, err
	}
	return h.bases[p] + SignalPadBytes + driver.DevicePtr(t.Off), nil
}

// Copy copies src of rank srcRank's heap into dst of rank dstRank's (any
// two ranks, this one or peers), in order on the allocator's stream
// (Allocator.Enqueue): made at once outside a capture, recorded in the
// allocator's own capture, so every replay copies the bytes as they are
// then. Ordering against the peers' own work is the engine's (a barrier
// kernel on the signal pads, or NCCL/RCCL).
func (h *DeviceHeap) Copy(dstRank int, dst Tensor, srcRank int, src Tensor) error {
	if dst.Size != src.Size {
		return fmt.Errorf("%w: symheap: copy of %d B into %d B", alloc.ErrInvalidSize, src.Size, dst.Size)
	}
	h.mu.Lock()
	to, err := h.ptrLocked(dstRank, dst)
	if err == nil {
		var from driver.DevicePtr
		if from, err = h.ptrLocked(srcRank, src); err == nil {
			err = h.peerClosedLocked(dstRank, srcRank)
		}
		if err == nil {
			d := h.a.Driver()
			err = h.a.Enqueue("symheap copy", []alloc.Buffer{h.buf}, func(s driver.Stream) error {
				return d.CopyDtoDAsync(to, from, src.Size, s)
			})
		}
	}
	h.mu.Unlock()
	return err
}
