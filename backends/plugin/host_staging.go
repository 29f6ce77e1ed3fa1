package plugin

import (
	"errors"
	"sync"
	"sync/atomic"

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

type chunkResult struct {
	i, slot int
	err     error
}

// stagedIn copies host bytes to the device through staging, op being the
// driver call each chunk makes (CopyHtoD or CopyHtoDAsync). The last chunk
// goes first: with the first one right after, both ends of the device
// range are checked before the middle is written, so a range that runs
// off its allocation fails before any byte lands.
func (d *Driver) stagedIn(op opcode, dst driver.DevicePtr, src []byte, s driver.Stream) (err error) {
	var async asyncErrs // reported by the chunk calls (blocking copies synchronize)
	defer func() { err = async.join(err) }()
	n := int64(len(src))
	if n == 0 {
		return async.call(d, op, copyReq(op, dst, 0, 0, 0, s))
	}
	m, err := d.getStaging()
	if err != nil {
		return err
	}
	k := int((n + chunk - 1) / chunk)
	span := func(i int) (int64, int64) { return int64(i) * chunk, min(chunk, n-int64(i)*chunk) }
	send := func(i, slot int) error {
		off, l := span(i)
		return async.call(d, op, copyReq(op, dst+driver.DevicePtr(off), m.id, int64(slot)*chunk, l, s))
	}
	if k == 1 {
		copy(m.buf, src)
		err = send(0, 0)
		d.finishStaging(m, err)
		return err
	}
	order := make([]int, 0, k)
	order = append(order, k-1)
	for i := 0; i < k-1; i++ {
		order = append(order, i)
	}
	free := make(chan int, 2)
	free <- 0
	free <- 1
	jobs := make(chan chunkResult, 2)
	done := make(chan error, 1)
	var failed atomic.Bool
	go func() { // the backend's side: one chunk call at a time, in order
		var first error
		for j := range jobs {
			if first == nil {
				if first = send(j.i, j.slot); first != nil {
					failed.Store(true)
				}
			}
			free <- j.slot
		}
		done <- first
	}()
	for _, i := range order {
		slot := <-free
		if failed.Load() {
			break
		}
		off, l := span(i)
		copy(m.buf[int64(slot)*chunk:int64(slot)*chunk+l], src[off:off+l])
		jobs <- chunkResult{i: i, slot: slot}
	}
	close(jobs)
	err = <-done
	d.finishStaging(m, err)
	return err
}

// stagedOut copies device bytes to host memory through staging, op being
// CopyDtoH or CopyDtoHAsync: the backend fills one slot while the host
// empties the other.
func (d *Driver) stagedOut(op opcode, dst []byte, src driver.DevicePtr, s driver.Stream) (err error) {
	var async asyncErrs
	defer func() { err = async.join(err) }()
	n := int64(len(dst))
	if n == 0 {
		return async.call(d, op, copyReq(op, src, 0, 0, 0, s))
	}
	m, err := d.getStaging()
	if err != nil {
		return err
	}
	k := int((n + chunk - 1) / chunk)
	span := func(i int) (int64, int64) { return int64(i) * chunk, min(chunk, n-int64(i)*chunk) }
	fetch := func(i, slot int) error {
		off, l := span(i)
		return async.call(d, op, copyReq(op, src+driver.DevicePtr(off), m.id, int64(slot)*chunk, l, s))
	}
	drain := func(i, slot int) {
		off, l := span(i)
		copy(dst[off:off+l], m.buf[int64(slot)*chunk:int64(slot)*chunk+l])
	}
	if k == 1 {
		if err = fetch(0, 0); err == nil {
			drain(0, 0)
		}
		d.finishStaging(m, err)
		return err
	}
	free := make(chan int, 2)
	free <- 0
	free <- 1
	filled := make(chan chunkResult, 2)
	stop := make(chan struct{})
	go func() { // the backend's side
		defer close(filled)
		for i := 0; i < k; i++ {
			var slot int
			select {
			case slot = <-free:
			case <-stop:
				return
			}
			err := fetch(i, slot)
			filled <- chunkResult{i: i, slot: slot, err: err}
			if err != nil {
				return
			}
		}
	}()
	for r := range filled {
		if r.err != nil {
			err = r.err
			break
		}
		drain(r.i, r.slot)
		free <- r.slot
	}
	close(stop)
	for range filled { // let the fetcher finish before the slots are reused
	}
	d.finishStaging(m, err)
	return err
}

// finishStaging returns the set, unless the backend died mid-copy.
func (d *Driver) finishStaging(m *mapping, err error) {
	if err != nil && d.dead.Load() != nil {
		return // Close unmaps it with the rest
	}
	d.putStaging(m)
}

// CopyHtoDAsync and CopyDtoHAsync with a host buffer are pipelined
// (host_pipeline.go): the buffer is shared memory, named by region, and
// HostFree, a call, runs after them. Pageable memory stages, each chunk a
// round trip, since the staging slot is reused at once.
func (d *Driver) CopyHtoDAsync(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	if m, off, ok := d.regions.find(src); ok {
		n := int64(len(src))
		return d.pipelined(opCopyHtoDAsync, func(e *enc) { copyArgs(e, dst, m.id, off, n, s) })
	}
	return d.stagedIn(opCopyHtoDAsync, dst, src, s)
}

func (d *Driver) CopyDtoHAsync(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	if m, off, ok := d.regions.find(dst); ok {
		n := int64(len(dst))
		return d.pipelined(opCopyDtoHAsync, func(e *enc) { copyArgs(e, src, m.id, off, n, s) })
	}
	return d.stagedOut(opCopyDtoHAsync, dst, src, s)
}

// CopyHtoD and CopyDtoH from pageable memory take the single-copy path
// (host_direct.go) when the backend offers it, and stage otherwise.
func (d *Driver) CopyHtoD(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	if m, off, ok := d.regions.find(src); ok {
		return d.callSync(opCopyHtoD, copyReq(opCopyHtoD, dst, m.id, off, int64(len(src)), s))
	}
	if len(src) > 0 && !d.noDirect.Load() {
		ok, async, err := d.directIn(dst, src, s)
		if !ok {
			err = d.stagedIn(opCopyHtoD, dst, src, s)
		}
		return joinAsync(async, err)
	}
	return d.stagedIn(opCopyHtoD, dst, src, s)
}

func (d *Driver) CopyDtoH(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	if m, off, ok := d.regions.find(dst); ok {
		return d.callSync(opCopyDtoH, copyReq(opCopyDtoH, src, m.id, off, int64(len(dst)), s))
	}
	if len(dst) > 0 && !d.noDirect.Load() {
		ok, async, err := d.directOut(dst, src, s)
		if !ok {
			err = d.stagedOut(opCopyDtoH, dst, src, s)
		}
		return joinAsync(async, err)
	}
	return d.stagedOut(opCopyDtoH, dst, src, s)
}
