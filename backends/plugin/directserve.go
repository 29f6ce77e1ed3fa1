package plugin

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
)

// directSpanner is a backend whose device bytes are host memory it can hand
// out (cpu.Driver.DirectSpan): a synchronizing call with the blocking
// copies' rules, returning the bytes behind [p, p+n) once s has run
// everything queued before it.
type directSpanner interface {
	DirectSpan(p alloc.DevicePtr, n int64, s alloc.Stream) ([]byte, error)
}

// errNoDirect is the child's answer when the backend has no direct access
// to device memory, or its device memory is not shared: the host then
// stages pageable copies for the life of the driver.
var errNoDirect = fmt.Errorf("%w: plugin: backend has no direct access to shared device memory", alloc.ErrDriver)

// directSpan answers a DirectSpan request (device address, length, stream)
// with where the bytes live: region id, fd, inode, region size, offset.
func (s *server) directSpan(d alloc.Driver, in *dec, out *enc) error {
	p, n, st := alloc.DevicePtr(in.u64()), in.i64(), alloc.Stream(in.u64())
	if in.err != nil {
		return in.err
	}
	ds, ok := d.(directSpanner)
	if !ok {
		return fmt.Errorf("%w (%s)", errNoDirect, d.Name())
	}
	if n <= 0 {
		return fmt.Errorf("%w: plugin: direct access of %d B", alloc.ErrInvalidValue, n)
	}
	b, err := ds.DirectSpan(p, n, st)
	if err != nil {
		return err
	}
	r, off := s.regions.containing(b)
	if r == nil {
		return fmt.Errorf("%w (%s: device memory is not from the plugin, backends.DeviceMemoryFrom)", errNoDirect, d.Name())
	}
	out.u64(r.id).i64(int64(r.fd)).u64(r.ino).i64(int64(len(r.buf))).i64(off)
	return nil
}
