package plugin

import (
	"fmt"
	"sync"
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
	sorted hostregion.Set[*region]
}

func (r *region) Start() uintptr { return hostregion.Addr(r.buf) }
func (r *region) Len() int       { return len(r.buf) }

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
	t.sorted.Insert(r)
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
	r, off, ok := t.sorted.Find(b)
	if !ok {
		return nil, 0
	}
	return r, int64(off)
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
	t.sorted.RemoveWhere(func(x *region) bool { return x == r })
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
