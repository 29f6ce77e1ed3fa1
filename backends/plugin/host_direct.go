package plugin

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Pageable blocking copies (CopyHtoD, CopyDtoH with a Go slice that is not
// a shared region) take a single-copy path when the backend's device memory
// is shared memory (cpu, whose allocations the plugin server backs with
// memfd regions): one DirectSpan round trip, in which the backend refuses
// during a capture, runs the stream's queued work and checks the range as
// the blocking copy would, then says where the device bytes live; this
// process maps that region (cached by id) and does the one memcpy itself.
// A backend without direct access answers errNoDirect once and the driver
// stages from then on.

// maxDirectMaps bounds the device regions kept mapped for direct copies.
const maxDirectMaps = 64

// directMap is one device region mapped here. refs counts copies using it;
// a mapping evicted while in use is unmapped by its last user.
type directMap struct {
	id      uint64
	buf     []byte
	refs    int
	evicted bool
}

// directCache maps region ids to mappings, evicting the oldest past
// maxDirectMaps. Ids are never reused, so an entry for a region the backend
// has since freed is only stale, never wrong: this process's mapping keeps
// the pages alive until it is evicted.
type directCache struct {
	mu    sync.Mutex
	byID  map[uint64]*directMap
	order []uint64 // insertion order, oldest first
}

// get returns id's mapping, referenced, or nil.
func (c *directCache) get(id uint64) *directMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byID[id]
	if m != nil {
		m.refs++
	}
	return m
}

// add caches a fresh mapping, referenced, unless another copy mapped id
// first: then that one is returned and b is unmapped.
func (c *directCache) add(id uint64, b []byte) *directMap {
	c.mu.Lock()
	if m := c.byID[id]; m != nil {
		m.refs++
		c.mu.Unlock()
		_ = unix.Munmap(b)
		return m
	}
	if c.byID == nil {
		c.byID = map[uint64]*directMap{}
	}
	m := &directMap{id: id, buf: b, refs: 1}
	c.byID[id] = m
	c.order = append(c.order, id)
	var unmap []*directMap
	for len(c.order) > maxDirectMaps {
		old := c.byID[c.order[0]]
		delete(c.byID, c.order[0])
		c.order = c.order[1:]
		old.evicted = true
		if old.refs == 0 {
			unmap = append(unmap, old)
		}
	}
	c.mu.Unlock()
	for _, o := range unmap {
		_ = unix.Munmap(o.buf)
	}
	return m
}

// put drops a reference, unmapping an evicted mapping nobody uses.
func (c *directCache) put(m *directMap) {
	c.mu.Lock()
	m.refs--
	last := m.evicted && m.refs == 0
	c.mu.Unlock()
	if last {
		_ = unix.Munmap(m.buf)
	}
}

// len is the number of cached mappings.
func (c *directCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// drop evicts everything (Close): idle mappings are unmapped now, those in
// use by their last user.
func (c *directCache) drop() {
	c.mu.Lock()
	var unmap []*directMap
	for _, m := range c.byID {
		m.evicted = true
		if m.refs == 0 {
			unmap = append(unmap, m)
		}
	}
	c.byID, c.order = nil, nil
	c.mu.Unlock()
	for _, m := range unmap {
		_ = unix.Munmap(m.buf)
	}
}

// directSpan asks the backend for device range [p, p+n) (n > 0) after s's
// queued work, and returns it mapped here, with the backend holding s at
// that point of its order; the caller copies, then calls done (which
// releases the stream and puts the mapping back). ok is false when the
// backend has no direct access: the caller stages instead, as every later
// copy will. async is what the request reported of pipelined operations
// on s (it synchronizes s), for the copy's result whichever path it takes.
func (d *Driver) directSpan(p driver.DevicePtr, n int64, s driver.Stream) (span []byte, done func() error, ok bool, async, err error) {
	r, err := d.call(opDirectSpan, newReq(opDirectSpan).u64(uint64(p)).i64(n).u64(uint64(s)))
	async = withAsync(r, nil)
	if errors.Is(err, errNoDirect) {
		d.noDirect.Store(true)
		return nil, nil, false, async, nil
	}
	if err != nil {
		return nil, nil, true, async, err
	}
	id, fd, ino, size, off, lease := r.u64(), r.i64(), r.u64(), r.i64(), r.i64(), r.u64()
	if r.err != nil {
		return nil, nil, true, async, r.err
	}
	// Unordered: an operation pipelined meanwhile may be waiting in the
	// backend for the stream this releases.
	release := func() error {
		_, err := d.callUnordered(opDirectDone, newReq(opDirectDone).u64(lease))
		return err
	}
	if size <= 0 || off < 0 || n > size-off {
		return nil, nil, true, async, errors.Join(errMalformed, release())
	}
	m := d.direct.get(id)
	if m == nil {
		b, err := mapChild(d.proc, int(fd), size, ino)
		if err != nil {
			err = d.mapErr(p, n, err)
			return nil, nil, true, async, errors.Join(err, release())
		}
		m = d.direct.add(id, b)
	}
	// Ids are never reused and a region never changes size: a reply that
	// disagrees with the cached mapping is forged (or a bug), and slicing
	// past the mapping would panic this process.
	if int64(len(m.buf)) != size || off+n > int64(len(m.buf)) {
		d.direct.put(m)
		return nil, nil, true, async, errors.Join(fmt.Errorf("%w: direct span [%d, +%d) of region %d announced at %d B, mapped at %d B",
			errMalformed, off, n, id, size, len(m.buf)), release())
	}
	return m.buf[off : off+n : off+n], func() error {
		d.direct.put(m)
		return release()
	}, true, async, nil
}

// mapErr explains why the region holding [p, p+n) could not be mapped.
func (d *Driver) mapErr(p driver.DevicePtr, n int64, err error) error {
	if e := d.deadErr(opDirectSpan); e != nil {
		return e
	}
	if errors.Is(err, errStaleRegion) { // freed by another goroutine meanwhile
		return fmt.Errorf("plugin %s: %v %#x+%d: %w", d.name, opDirectSpan, uint64(p), n, err)
	}
	return fmt.Errorf("%w: plugin %s: %v: %w", driver.ErrDriver, d.name, opDirectSpan, err)
}

// directCopy is CopyHtoD's (toDevice) and CopyDtoH's single-copy path
// between host and the device range at dev; ok is false when the driver
// must stage instead (async, reported failures of pipelined operations,
// then goes with the staged copy's result).
func (d *Driver) directCopy(dev driver.DevicePtr, host []byte, s driver.Stream, toDevice bool) (ok bool, async, err error) {
	span, done, ok, async, err := d.directSpan(dev, int64(len(host)), s)
	if !ok || err != nil {
		return ok, async, err
	}
	if toDevice {
		copy(span, host)
	} else {
		copy(host, span)
	}
	return true, async, done()
}
