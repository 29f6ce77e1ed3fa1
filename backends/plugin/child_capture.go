package plugin

import (
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// captureView is what every reply tells the host of capture
// (host_capture.go): each live stream's capture status, read from the
// backend's driver after the call, those not capturing left out, and a
// number that orders the reads, so the host keeps the newest whatever
// order replies arrive in. Every stream is read, not only those the host
// began a capture on: a backend that invalidates or ends a capture on its
// own is seen at the next reply.
type captureView struct {
	mu      sync.Mutex
	seq     uint64
	streams map[driver.Stream]struct{} // created through this server, not destroyed
	buf     []streamStatus
}

func (v *captureView) add(s driver.Stream) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.streams == nil {
		v.streams = map[driver.Stream]struct{}{}
	}
	v.streams[s] = struct{}{}
}

func (v *captureView) remove(s driver.Stream) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.streams, s)
}

// encode reads and writes the view (d nil: no backend open, nothing
// captures). Numbering and reading under one lock makes a later number a
// later read.
func (v *captureView) encode(d driver.Driver, e *enc) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	e.u64(v.seq)
	v.buf = v.buf[:0]
	if d != nil {
		for s := range v.streams {
			if st, err := d.StreamCaptureStatus(s); err == nil && st != driver.CaptureNone {
				v.buf = append(v.buf, streamStatus{s, st})
			}
		}
	}
	e.u64(uint64(len(v.buf)))
	for _, x := range v.buf {
		e.u64(uint64(x.s)).u64(uint64(x.st))
	}
}
