package plugin

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

// The host answers StreamCaptureStatus itself, with no round trip.
// It is sound under docs/design.md's rule that the driver's
// status is the authority because the host is the driver the allocator
// talks to, and its answer is the backend driver's own: every reply carries
// the backend's status of each stream that is capturing, read from its
// driver after the call (child_capture.go), numbered so that the newest
// read wins whatever order replies arrive in. A stream's status changes
// only through calls to the backend's driver (a begin, an end, a call that
// invalidates), the backend's streams are handles in its process that only
// this host can name, and every call reaches the backend through the host;
// so the status the host holds is the backend's as of its last reply, and
// a call still in flight is concurrent with the question. docs/plugin-mode.md
// has the argument and its limits.

// captureTrack is the host's record of its backend's streams. Driver.mu
// guards it.
type captureTrack struct {
	streams   map[driver.Stream]struct{}             // created through this host and not destroyed
	status    map[driver.Stream]driver.CaptureStatus // the capturing ones, from the newest view
	seq       uint64                                 // that view's number
	beginning int                                    // BeginCapture calls in flight
}

func (t *captureTrack) init() {
	t.streams = map[driver.Stream]struct{}{}
	t.status = map[driver.Stream]driver.CaptureStatus{}
}

// capturingLocked says whether a capture is under way, or may be starting,
// on any of the backend's streams: then nothing is pipelined.
func (t *captureTrack) capturingLocked() bool { return len(t.status) > 0 || t.beginning > 0 }

// applyView keeps a reply's capture view if it is newer than the one held.
func (d *Driver) applyView(r *dec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := &d.track
	if r.viewSeq <= t.seq {
		return
	}
	t.seq = r.viewSeq
	clear(t.status)
	for _, v := range r.view {
		if v.st != driver.CaptureNone {
			t.status[v.s] = v.st
		}
	}
}

// localStatus is s's capture status as the host knows it; ok is false for
// a stream it does not know (never created here, or destroyed), which the
// backend answers itself (with its error for a bad handle).
func (d *Driver) localStatus(s driver.Stream) (st driver.CaptureStatus, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.track.streams[s]; !ok {
		return driver.CaptureNone, false
	}
	return d.track.status[s], true
}

func (d *Driver) streamCreated(s driver.Stream) {
	d.mu.Lock()
	d.track.streams[s] = struct{}{}
	d.mu.Unlock()
}

func (d *Driver) streamDestroyed(s driver.Stream) {
	d.mu.Lock()
	delete(d.track.streams, s)
	delete(d.track.status, s)
	d.mu.Unlock()
}

// beginning counts a BeginCapture in flight (delta 1, then -1): until its
// reply says whether the capture began, nothing is pipelined.
func (d *Driver) beginning(delta int) {
	d.mu.Lock()
	d.track.beginning += delta
	d.mu.Unlock()
}

// StreamCaptureStatus is answered here for the streams this host created;
// see the top of this file.
func (d *Driver) StreamCaptureStatus(s driver.Stream) (driver.CaptureStatus, error) {
	if err := d.deadErr(opStreamCaptureStatus); err != nil {
		return driver.CaptureNone, err
	}
	if st, ok := d.localStatus(s); ok {
		return st, nil
	}
	r, err := d.call(opStreamCaptureStatus, newReq(opStreamCaptureStatus).u64(uint64(s)))
	if err != nil {
		return driver.CaptureNone, err
	}
	return driver.CaptureStatus(r.u64()), r.err
}
