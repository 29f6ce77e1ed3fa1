package plugin

import (
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// spanLeases are the streams held for direct copies the host is making: a
// blocking copy runs at its place in stream order, so the stream stays held
// from the DirectSpan reply until the host's DirectDone (work another
// goroutine enqueues meanwhile runs after the copy, never during it). If
// the host dies, so does this process.
type spanLeases struct {
	mu   sync.Mutex
	next uint64
	held map[uint64]func()
}

func (l *spanLeases) start(release func()) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[uint64]func(){}
	}
	l.next++
	l.held[l.next] = release
	return l.next
}

func (l *spanLeases) end(id uint64) error {
	l.mu.Lock()
	release := l.held[id]
	delete(l.held, id)
	l.mu.Unlock()
	if release == nil {
		return fmt.Errorf("%w: plugin: no direct copy %d in progress", alloc.ErrInvalidValue, id)
	}
	release()
	return nil
}

// errNoDirect is the child's answer when the backend has no direct access
// to device memory, or its device memory is not shared: the host then
// stages pageable copies for the life of the driver.
var errNoDirect = fmt.Errorf("%w: plugin: backend has no direct access to shared device memory", driver.ErrDriver)

// directSpan answers a DirectSpan request (device address, length, stream)
// with where the bytes live: region id, fd, inode, region size, offset,
// and the lease that holds the stream until DirectDone.
// It synchronizes the stream, so it reports the failures of pipelined
// operations on it.
func (s *server) directSpan(d driver.Driver, in *dec, rep *reply) error {
	p, n, st := driver.DevicePtr(in.u64()), in.i64(), driver.Stream(in.u64())
	if in.err != nil {
		return in.err
	}
	out := &rep.out
	defer rep.report(s, st)
	ds, ok := d.(driver.DirectSpanner)
	if !ok {
		return fmt.Errorf("%w (%s)", errNoDirect, d.Name())
	}
	if n <= 0 {
		return fmt.Errorf("%w: plugin: direct access of %d B", alloc.ErrInvalidValue, n)
	}
	b, release, err := ds.DirectSpan(p, n, st)
	if err != nil {
		return err
	}
	r, off := s.regions.containing(b)
	if r == nil {
		release()
		return fmt.Errorf("%w (%s: device memory is not from the plugin, backends.Choice.Memory)", errNoDirect, d.Name())
	}
	out.u64(r.id).i64(int64(r.fd)).u64(r.ino).i64(int64(len(r.buf))).i64(off).u64(s.leases.start(release))
	return nil
}
