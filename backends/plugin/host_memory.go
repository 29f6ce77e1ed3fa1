package plugin

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// HostAlloc returns pinned host memory that lives in a region shared with
// the backend process: the backend's HostAlloc took it from the plugin
// server (backends.HostMemory), and this process maps the same pages.
func (d *Driver) HostAlloc(size int64) ([]byte, error) {
	m, err := d.allocShared(opHostAlloc, opHostFree, size, false)
	if err != nil {
		return nil, err
	}
	return m.buf, nil
}

// allocShared has the backend create a shared region of size bytes (op),
// maps it here and registers it; if it cannot be mapped, free (the
// matching release op) gives it back, so nothing leaks on either side.
func (d *Driver) allocShared(op, free opcode, size int64, staging bool) (*mapping, error) {
	r, err := d.call(op, newReq(op).i64(size))
	if err != nil {
		return nil, err
	}
	id, fd := r.u64(), r.i64()
	if r.err != nil {
		return nil, r.err
	}
	b, err := mapChild(d.proc, int(fd), size, 0)
	if err != nil {
		_ = d.callErr(free, newReq(free).u64(id))
		return nil, fmt.Errorf("%w: plugin %s: %s %d B: %w", alloc.ErrOutOfMemory, d.name, op, size, err)
	}
	m := &mapping{id: id, start: hostregion.Addr(b), buf: b, staging: staging}
	d.regions.add(m)
	return m, nil
}

// HostFree releases a HostAlloc buffer in both processes. If the backend
// refuses (a capture forbids it), the buffer stays valid. If the backend is
// dead, this side is still unmapped and the error says why.
func (d *Driver) HostFree(b []byte) error {
	m := d.regions.exact(b)
	if m == nil {
		if err := d.deadErr(opHostFree); err != nil {
			return err
		}
		return fmt.Errorf("%w: plugin %s: host free %p (%d B): not a buffer from HostAlloc, or already freed",
			alloc.ErrInvalidValue, d.name, unsafe.SliceData(b), len(b))
	}
	err := d.callErr(opHostFree, newReq(opHostFree).u64(m.id))
	if err != nil && d.dead.Load() == nil {
		return err
	}
	if !d.regions.remove(m) {
		return fmt.Errorf("%w: plugin %s: host free: buffer freed concurrently", alloc.ErrInvalidValue, d.name)
	}
	if uerr := retire(m, false); uerr != nil && err == nil {
		err = fmt.Errorf("%w: plugin %s: unmapping host buffer: %v", driver.ErrDriver, d.name, uerr)
	}
	return err
}
