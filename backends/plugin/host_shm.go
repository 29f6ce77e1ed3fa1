package plugin

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// mapping is the host's side of one region.
type mapping struct {
	id      uint64
	start   uintptr
	buf     []byte
	staging bool // internal copy staging, never handed to the caller
}

// mapChild maps size bytes of the backend's fd n into this process. The
// backend is not trusted: the file must be a memfd of at least size bytes
// sealed against shrinking (else a later ftruncate in the backend would
// make this process fault on the mapping), and the process must still be
// alive once the file is open (else its pid may name another process).
// ino, when not 0, is the memfd's inode as the backend announced it.
func mapChild(p *process, fd int, size int64, ino uint64) ([]byte, error) {
	b, err := mapChildFile(p.pid, fd, size, ino)
	if err != nil {
		return nil, err
	}
	if !p.alive() {
		_ = unix.Munmap(b)
		return nil, fmt.Errorf("%w: plugin: backend process %d exited while its shared memory was being mapped", driver.ErrBackendCrashed, p.pid)
	}
	return b, nil
}

// errStaleRegion is a region whose fd the backend closed (freed) before
// this process opened it: the number may now name another file.
var errStaleRegion = fmt.Errorf("%w: plugin: shared region freed before it was mapped", alloc.ErrInvalidValue)

// mapChildFile opens pid's fd n and maps its first size bytes, checking
// when ino is not 0 that the fd still names that memfd, and always that
// the file is safe to map (checkRegionFile).
func mapChildFile(pid, fd int, size int64, ino uint64) ([]byte, error) {
	if size <= 0 || fd < 0 {
		return nil, fmt.Errorf("%w: shared region of %d B at fd %d", errMalformed, size, fd)
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		if ino != 0 && os.IsNotExist(err) {
			return nil, errStaleRegion
		}
		return nil, fmt.Errorf("opening the backend's shared memory: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("fstat of the backend's shared memory: %w", err)
	}
	if ino != 0 && (st.Ino != ino || st.Size < size) {
		return nil, errStaleRegion
	}
	if err := checkRegionFile(int(f.Fd()), &st, size); err != nil {
		return nil, err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d B of the backend's shared memory: %w", size, err)
	}
	return b, nil
}

// hostRegions is the host's table, sorted by address so a copy's host slice
// resolves to (region, offset) with a binary search and no lock.
type hostRegions struct{ hostregion.Set[*mapping] }

func (m *mapping) Start() uintptr { return m.start }
func (m *mapping) Len() int       { return len(m.buf) }

func (t *hostRegions) add(m *mapping) { t.Insert(m) }

// remove drops m; false if it was not there (freed concurrently).
func (t *hostRegions) remove(m *mapping) bool {
	_, ok := t.RemoveWhere(func(x *mapping) bool { return x == m })
	return ok
}

// takeAll empties the table and returns what it held.
func (t *hostRegions) takeAll() []*mapping { return t.Take() }

// find returns the caller-visible region holding all of b, and b's offset.
func (t *hostRegions) find(b []byte) (*mapping, int64, bool) {
	m, off, ok := t.Find(b)
	if !ok || m.staging {
		return nil, 0, false
	}
	return m, int64(off), true
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
