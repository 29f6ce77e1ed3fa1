package plugin

import (
	"errors"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Copies whose host memory is not a shared region (pageable memory) go
// through staging: a shared region of two chunk-sized slots. The host
// copies chunk i into one slot while the backend copies chunk i-1 out of
// the other, so the two memcpys overlap and a large copy runs near memcpy
// speed instead of half of it.

// chunk is the staging slot size: large enough that the per-chunk round
// trip (~120 µs on the 2-core CI box) is small next to the memcpy. Measured
// 4, 8 and 16 MiB with BenchmarkTransfer; 16 MiB was fastest for 64 MiB
// pageable copies. A set (two slots) is only touched when used.
const chunk = 16 << 20

// maxIdleStaging bounds the staging sets kept for reuse.
const maxIdleStaging = 2

type stagingPool struct {
	mu   sync.Mutex
	idle []*mapping
}

// get returns a staging set (2*chunk bytes), reusing an idle one.
func (d *Driver) getStaging() (*mapping, error) {
	p := &d.staging
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		m := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return m, nil
	}
	p.mu.Unlock()
	return d.allocShared(opStagingAlloc, opStagingFree, 2*chunk, true)
}

// putStaging returns a set for reuse, or frees it when enough are idle.
func (d *Driver) putStaging(m *mapping) {
	p := &d.staging
	p.mu.Lock()
	if len(p.idle) < maxIdleStaging && !d.closed.Load() {
		p.idle = append(p.idle, m)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if d.regions.remove(m) {
		_ = d.callErr(opStagingFree, newReq(opStagingFree).u64(m.id))
		_ = retire(m, false)
	}
}

// drop forgets idle sets; Close unmaps them with every other region.
func (p *stagingPool) drop() {
	p.mu.Lock()
	p.idle = nil
	p.mu.Unlock()
}

// copyReq is one chunk's request: dev, region, offset, length, stream.
func copyReq(op opcode, dev driver.DevicePtr, id uint64, off, n int64, s driver.Stream) *enc {
	e := newReq(op)
	copyArgs(e, dev, id, off, n, s)
	return e
}

func copyArgs(e *enc, dev driver.DevicePtr, id uint64, off, n int64, s driver.Stream) {
	e.u64(uint64(dev)).u64(id).i64(off).i64(n).u64(uint64(s))
}

// asyncErrs gathers the failures of pipelined operations that the calls of
// one staged copy report (they may run on two goroutines).
type asyncErrs struct {
	mu   sync.Mutex
	errs []error
}

// call is callErr, keeping what the reply reports.
func (a *asyncErrs) call(d *Driver, op opcode, req *enc) error {
	r, err := d.call(op, req)
	if r != nil && len(r.async) > 0 {
		a.mu.Lock()
		a.errs = append(a.errs, r.async...)
		a.mu.Unlock()
	}
	return err
}

// join puts them before the copy's own error.
func (a *asyncErrs) join(err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) == 0 {
		return err
	}
	return errors.Join(append(a.errs, err)...)
}

// staged copies between host's bytes and the device range at dev through
// staging, op being the driver call each chunk makes and naming its slot:
// CopyHtoD or CopyHtoDAsync (toDevice), where the host fills one slot
// while the backend copies the other out, or CopyDtoH or CopyDtoHAsync,
// where the backend fills one slot while the host empties the other. To
// the device the last chunk goes first: with the first one right after,
// both ends of the device range are checked before the middle is
// written, so a range that runs off its allocation fails before any byte
// lands.
func (d *Driver) staged(op opcode, dev driver.DevicePtr, host []byte, s driver.Stream, toDevice bool) (err error) {
	var async asyncErrs // reported by the chunk calls (blocking copies synchronize)
	defer func() { err = async.join(err) }()
	n := int64(len(host))
	if n == 0 {
		return async.call(d, op, copyReq(op, dev, 0, 0, 0, s))
	}
	m, err := d.getStaging()
	if err != nil {
		return err
	}
	k := int((n + chunk - 1) / chunk)
	// parts is chunk i's bytes in host memory and in slot.
	parts := func(i, slot int) (h, b []byte) {
		off, l := int64(i)*chunk, min(chunk, n-int64(i)*chunk)
		return host[off : off+l], m.buf[int64(slot)*chunk : int64(slot)*chunk+l]
	}
	call := func(i, slot int) error {
		h, _ := parts(i, slot)
		return async.call(d, op, copyReq(op, dev+driver.DevicePtr(int64(i)*chunk), m.id, int64(slot)*chunk, int64(len(h)), s))
	}
	order := make([]int, 0, k)
	if toDevice {
		order = append(order, k-1)
		for i := 0; i < k-1; i++ {
			order = append(order, i)
		}
		err = twoSlots(order, func(i, slot int) error { h, b := parts(i, slot); copy(b, h); return nil }, call)
	} else {
		for i := 0; i < k; i++ {
			order = append(order, i)
		}
		err = twoSlots(order, call, func(i, slot int) error { h, b := parts(i, slot); copy(h, b); return nil })
	}
	d.finishStaging(m, err)
	return err
}

// twoSlots runs fill and then empty on every chunk of order through the two
// slots of a staging set: fill on a goroutine of its own, empty on the
// caller's, so the two overlap. Chunks are emptied in order; a slot is
// filled again only once emptied. The first error of either stops the copy
// (no later chunk is filled or emptied) and is returned once the goroutine
// is done, so the slots are free to reuse. One chunk runs on the caller
// alone.
func twoSlots(order []int, fill, empty func(i, slot int) error) error {
	if len(order) == 1 {
		if err := fill(order[0], 0); err != nil {
			return err
		}
		return empty(order[0], 0)
	}
	type filledChunk struct {
		i, slot int
		err     error
	}
	free := make(chan int, 2)
	free <- 0
	free <- 1
	filled := make(chan filledChunk, 2)
	stop := make(chan struct{})
	go func() {
		defer close(filled)
		for _, i := range order {
			var slot int
			select {
			case slot = <-free:
			case <-stop:
				return
			}
			err := fill(i, slot)
			filled <- filledChunk{i: i, slot: slot, err: err}
			if err != nil {
				return
			}
		}
	}()
	var err error
	for c := range filled {
		if err = c.err; err == nil {
			err = empty(c.i, c.slot)
		}
		if err != nil {
			break
		}
		free <- c.slot
	}
	close(stop)
	for range filled { // let the filler finish before the slots are reused
	}
	return err
}

// finishStaging returns the set, unless the backend died mid-copy.
func (d *Driver) finishStaging(m *mapping, err error) {
	if err != nil && d.dead.Load() != nil {
		return // Close unmaps it with the rest
	}
	d.putStaging(m)
}

// The copies between host memory and a device range, each a hostCopy:
// CopyHtoDAsync and CopyDtoHAsync with a host buffer are pipelined
// (host_pipeline.go): the buffer is shared memory, named by region, and
// HostFree, a call, runs after them. CopyHtoD and CopyDtoH with one are a
// call. From pageable memory the async copies stage, each chunk a round
// trip, since the staging slot is reused at once; the blocking ones take
// the single-copy path (host_direct.go) when the backend offers it, and
// stage otherwise.
func (d *Driver) CopyHtoDAsync(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	return d.hostCopy(opCopyHtoDAsync, dst, src, s, true)
}
func (d *Driver) CopyDtoHAsync(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	return d.hostCopy(opCopyDtoHAsync, src, dst, s, false)
}
func (d *Driver) CopyHtoD(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	return d.hostCopy(opCopyHtoD, dst, src, s, true)
}
func (d *Driver) CopyDtoH(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	return d.hostCopy(opCopyDtoH, src, dst, s, false)
}

// hostCopy is op (one of the four copies above) between host and the
// device range at dev, to the device when toDevice.
func (d *Driver) hostCopy(op opcode, dev driver.DevicePtr, host []byte, s driver.Stream, toDevice bool) error {
	blocking := op == opCopyHtoD || op == opCopyDtoH
	if m, off, ok := d.regions.find(host); ok {
		n := int64(len(host))
		if blocking {
			return d.callSync(op, copyReq(op, dev, m.id, off, n, s))
		}
		return d.pipelined(op, func(e *enc) { copyArgs(e, dev, m.id, off, n, s) })
	}
	if blocking && len(host) > 0 && !d.noDirect.Load() {
		ok, async, err := d.directCopy(dev, host, s, toDevice)
		if !ok {
			err = d.staged(op, dev, host, s, toDevice)
		}
		return joinAsync(async, err)
	}
	return d.staged(op, dev, host, s, toDevice)
}
