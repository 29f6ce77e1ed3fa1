package plugin

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// Shared memory: the child creates each region as a memfd and maps it; the
// host maps the same file through /proc/<child>/fd/<n> (a parent may read
// its child's fds: same user, and the child is its descendant). Regions are
// sealed against shrinking, so neither side can make the other's mapping
// fault. Pinned host buffers and copy staging are both regions.

// region is the child's side of one shared region.
type region struct {
	id  uint64
	fd  int
	ino uint64 // the memfd's inode: the host checks it maps this file
	buf []byte
}

func (r *region) release() error {
	err := unix.Munmap(r.buf)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	return err
}

// childRegions is the child's table of regions, by id (for requests), by
// address (for the driver's HostFree, which passes the slice back) and
// sorted by address (for DirectSpan's slices, which point inside one).
// Ids are never reused.
type childRegions struct {
	mu     sync.RWMutex
	nextID uint64
	byID   map[uint64]*region
	byAddr map[*byte]*region
	sorted []*region
}

func regionStart(r *region) uintptr { return hostregion.Addr(r.buf) }

func cmpStart(r *region, p uintptr) int {
	switch s := regionStart(r); {
	case s < p:
		return -1
	case s > p:
		return 1
	}
	return 0
}

func newChildRegions() *childRegions {
	return &childRegions{byID: map[uint64]*region{}, byAddr: map[*byte]*region{}}
}

func (t *childRegions) create(size int64) (*region, error) {
	t.mu.Lock()
	t.nextID++
	id := t.nextID
	t.mu.Unlock()
	r, err := newRegion(id, size)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.byID[id] = r
	t.byAddr[unsafe.SliceData(r.buf)] = r
	i, _ := slices.BinarySearchFunc(t.sorted, regionStart(r), cmpStart)
	t.sorted = slices.Insert(t.sorted, i, r)
	t.mu.Unlock()
	return r, nil
}

func (t *childRegions) byPtr(b []byte) *region {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r := t.byAddr[unsafe.SliceData(b)]
	if r == nil || len(r.buf) != len(b) {
		return nil
	}
	return r
}

// containing returns the region holding all of b (non-empty) and b's
// offset in it, or nil.
func (t *childRegions) containing(b []byte) (*region, int64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i, off := hostregion.Find(t.sorted, regionStart, func(r *region) uintptr { return uintptr(len(r.buf)) }, b)
	if i < 0 {
		return nil, 0
	}
	return t.sorted[i], int64(off)
}

func (t *childRegions) get(id uint64) *region {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[id]
}

func (t *childRegions) remove(r *region) error {
	t.mu.Lock()
	delete(t.byID, r.id)
	delete(t.byAddr, unsafe.SliceData(r.buf))
	if i, ok := slices.BinarySearchFunc(t.sorted, regionStart(r), cmpStart); ok {
		t.sorted = slices.Delete(t.sorted, i, i+1)
	}
	t.mu.Unlock()
	return r.release()
}

// Alloc and Free make the table the backend's backends.HostMemory, so its
// HostAlloc hands out shared memory.
func (t *childRegions) Alloc(size int64) ([]byte, error) {
	r, err := t.create(size)
	if err != nil {
		return nil, err
	}
	return r.buf, nil
}

func (t *childRegions) Free(b []byte) error {
	r := t.byPtr(b)
	if r == nil {
		return fmt.Errorf("%w: plugin: %d B at %p is not a shared region", alloc.ErrInvalidValue, len(b), unsafe.SliceData(b))
	}
	return t.remove(r)
}

// span is [off, off+n) of region id; id 0 with n 0 is "no memory".
func (t *childRegions) span(id uint64, off, n int64) ([]byte, error) {
	if id == 0 && off == 0 && n == 0 {
		return nil, nil
	}
	r := t.get(id)
	if r == nil {
		return nil, fmt.Errorf("%w: plugin: unknown shared region %d", alloc.ErrInvalidValue, id)
	}
	if off < 0 || n < 0 || off > int64(len(r.buf)) || n > int64(len(r.buf))-off {
		return nil, fmt.Errorf("%w: plugin: [%d, +%d) outside shared region %d of %d B", alloc.ErrInvalidValue, off, n, id, len(r.buf))
	}
	return r.buf[off : off+n : off+n], nil
}

// mapping is the host's side of one region.
type mapping struct {
	id      uint64
	start   uintptr
	buf     []byte
	staging bool // internal copy staging, never handed to the caller
}

// mapChild maps the child's fd n of size bytes into this process.
func mapChild(pid, fd int, size int64) ([]byte, error) { return mapChildFile(pid, fd, size, 0) }

// errStaleRegion is a region whose fd the backend closed (freed) before
// this process opened it: the number may now name another file.
var errStaleRegion = fmt.Errorf("%w: plugin: shared region freed before it was mapped", alloc.ErrInvalidValue)

// mapChildFile is mapChild, checking when ino is not 0 that the fd still
// names that memfd, at least size bytes long.
func mapChildFile(pid, fd int, size int64, ino uint64) ([]byte, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR, 0)
	if err != nil {
		if ino != 0 && os.IsNotExist(err) {
			return nil, errStaleRegion
		}
		return nil, fmt.Errorf("opening the backend's shared memory: %w", err)
	}
	defer f.Close()
	if ino != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return nil, fmt.Errorf("fstat of the backend's shared memory: %w", err)
		}
		if st.Ino != ino || st.Size < size {
			return nil, errStaleRegion
		}
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d B of the backend's shared memory: %w", size, err)
	}
	return b, nil
}

// hostRegions is the host's table, sorted by address so a copy's host slice
// resolves to (region, offset) with a binary search and no lock.
type hostRegions struct {
	mu     sync.Mutex
	sorted atomic.Pointer[[]*mapping]
}

func (t *hostRegions) add(m *mapping) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	i, _ := slices.BinarySearchFunc(old, m.start, func(x *mapping, p uintptr) int {
		if x.start < p {
			return -1
		}
		return 1
	})
	ms := slices.Insert(slices.Clone(old), i, m)
	t.sorted.Store(&ms)
}

func (t *hostRegions) load() []*mapping {
	if p := t.sorted.Load(); p != nil {
		return *p
	}
	return nil
}

// remove drops m; false if it was not there (freed concurrently).
func (t *hostRegions) remove(m *mapping) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	i := slices.Index(old, m)
	if i < 0 {
		return false
	}
	ms := slices.Delete(slices.Clone(old), i, i+1)
	t.sorted.Store(&ms)
	return true
}

// takeAll empties the table and returns what it held.
func (t *hostRegions) takeAll() []*mapping {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	t.sorted.Store(&[]*mapping{})
	return old
}

// find returns the caller-visible region holding all of b, and b's offset.
func (t *hostRegions) find(b []byte) (*mapping, int64, bool) {
	ms := t.load()
	i, off := hostregion.Find(ms, func(m *mapping) uintptr { return m.start }, func(m *mapping) uintptr { return uintptr(len(m.buf)) }, b)
	if i < 0 || ms[i].staging {
		return nil, 0, false
	}
	return ms[i], int64(off), true
}

// exact returns the region b is exactly (as HostAlloc returned it).
func (t *hostRegions) exact(b []byte) *mapping {
	m, off, ok := t.find(b)
	if !ok || off != 0 || len(m.buf) != len(b) {
		return nil
	}
	return m
}

// retire unmaps m. A buffer the caller may still hold (a host buffer left
// alive at Close) is replaced by private zero pages instead: touching it
// after Close reads zeros rather than crashing the engine, and the shared
// pages are released either way.
func retire(m *mapping, callerMayHold bool) error {
	if !callerMayHold {
		return unix.Munmap(m.buf)
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(m.buf)), uintptr(len(m.buf)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_FIXED|unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	return err
}
