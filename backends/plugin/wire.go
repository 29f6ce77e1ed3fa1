package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// The wire format is varints in a fixed order per operation: a request is
// an opcode and its arguments; a reply is a status byte and either the
// results or an error. No protobuf: the messages are a few integers, and
// encoding them by hand keeps a round trip close to a bare gRPC call.

// msg is what the codec carries: already-encoded bytes.
type msg struct{ b []byte }

type enc struct{ b []byte }

func newReq(op opcode) *enc { return &enc{b: append(make([]byte, 0, 32), byte(op))} }

func (e *enc) u64(v uint64) *enc { e.b = binary.AppendUvarint(e.b, v); return e }
func (e *enc) i64(v int64) *enc  { e.b = binary.AppendVarint(e.b, v); return e }
func (e *enc) bool(v bool) *enc {
	if v {
		return e.u64(1)
	}
	return e.u64(0)
}
func (e *enc) str(s string) *enc {
	e.u64(uint64(len(s)))
	e.b = append(e.b, s...)
	return e
}

// errMalformed is a message that does not decode: a version skew between
// host and plugin binaries, or a bug.
var errMalformed = fmt.Errorf("%w: plugin: malformed message", driver.ErrDriver)

type dec struct {
	b   []byte
	err error

	// Read from a reply's header by decodeReply.
	viewSeq uint64
	view    []streamStatus
	async   []error // *AsyncError, in the order the backend ran them
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = errMalformed
	}
	d.b = nil
}

// varint takes one varint off d with read (binary.Uvarint or
// binary.Varint); a truncated or overlong one fails d and reads as 0.
func varint[T uint64 | int64](d *dec, read func([]byte) (T, int)) T {
	v, n := read(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) u64() uint64 { return varint(d, binary.Uvarint) }

func (d *dec) i64() int64 { return varint(d, binary.Varint) }

func (d *dec) bool() bool { return d.u64() != 0 }

func (d *dec) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) str() string {
	n := d.u64()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// sentinels are the errors a reply can carry across the process boundary,
// by position: append only, so old and new binaries agree.
var sentinels = []error{
	alloc.ErrCaptureIncompatibleAllocation, alloc.ErrSyncDuringCapture, alloc.ErrCaptureInvalidated,
	alloc.ErrCaptureTimeout, alloc.ErrNotCapturing, alloc.ErrAlreadyCapturing, driver.ErrCaptureIllegalOp,
	driver.ErrCaptureUnavailable, alloc.ErrOutOfMemory, alloc.ErrInvalidBuffer, alloc.ErrInvalidSize,
	alloc.ErrOutOfRange, alloc.ErrMisaligned, alloc.ErrInvalidValue, alloc.ErrClosed, alloc.ErrLeaked,
	driver.ErrBackendUnavailable, driver.ErrBackendCrashed, driver.ErrBackendHung, driver.ErrDriver,
	errInvalidConfig, errUnknownBackend, errNoDirect,
}

// remoteError is an error returned by the backend in the child: its text,
// and the sentinels it wrapped there, so errors.Is works on this side.
type remoteError struct {
	msg string
	is  []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.is }

const (
	replyOK  = 0
	replyErr = 1
)

// encodeErr appends an error reply's body: the sentinels err wraps, as a
// mask over sentinels, and its text.
func encodeErr(e *enc, err error) {
	var mask uint64
	for i, s := range sentinels {
		if errors.Is(err, s) {
			mask |= 1 << i
		}
	}
	e.u64(mask)
	msg := err.Error()
	if len(msg) > maxErrText {
		msg = msg[:maxErrText] + errTextCut
	}
	e.str(msg)
}

// decodeErr reads what encodeErr wrote.
func (d *dec) decodeErr() error {
	mask := d.u64()
	text := d.str()
	if d.err != nil {
		return d.err
	}
	if len(text) > maxErrText+len(errTextCut) {
		d.fail()
		return fmt.Errorf("%w: an error's text of %d B, at most %d", errMalformed, len(text), maxErrText+len(errTextCut))
	}
	re := &remoteError{msg: text}
	for i, s := range sentinels {
		if mask&(1<<i) != 0 {
			re.is = append(re.is, s)
		}
	}
	if len(re.is) == 0 {
		re.is = []error{driver.ErrDriver}
	}
	return re
}

// maxErrText bounds an error's text so a reply never nears gRPC's limits;
// a longer text is cut and ends in errTextCut. The host refuses a longer
// one as malformed.
const (
	maxErrText = 64 << 10
	errTextCut = "…"
)

// A request is the position in the pipeline it must follow (the number of
// pipelined batches the host had formed when it made the request; the
// backend runs it once those have run), an opcode and its arguments. A
// reply is a status byte, the backend's capture view after the call (a
// sequence number, then each stream that is capturing and its status), the
// failures of pipelined operations the call reports (host_pipeline.go),
// then the results, or the call's error.

// streamStatus is one entry of a reply's capture view.
type streamStatus struct {
	s  driver.Stream
	st driver.CaptureStatus
}

// maxViewed bounds a reply's capture view: more capturing streams than
// this in one backend is a malformed reply.
const maxViewed = 1 << 16

// maxReported bounds a reply's failures of pipelined operations by what
// one call can report: the failures of the one stream it synchronizes,
// which the backend keeps up to maxFailedKept of, plus the one entry that
// counts the rest (child_pipeline.go). More, or entries on two streams,
// is a malformed reply; with each text bounded by maxErrText, so is the
// reply's whole error text.
const maxReported = maxFailedKept + 1

// decodeReply returns the result decoder, with the capture view and the
// reported failures of pipelined operations, and the call's own error. r
// is nil only when the reply does not decode.
func decodeReply(b []byte) (r *dec, err error) {
	if len(b) == 0 {
		return nil, errMalformed
	}
	r = &dec{b: b[1:]}
	status := b[0]
	r.viewSeq = r.u64()
	n := r.u64()
	if n > maxViewed {
		return nil, errMalformed
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.view = append(r.view, streamStatus{driver.Stream(r.u64()), driver.CaptureStatus(r.u64())})
	}
	m := r.u64()
	if m > maxReported {
		return nil, fmt.Errorf("%w: %d failures of pipelined operations reported, one call reports at most %d", errMalformed, m, maxReported)
	}
	var first driver.Stream
	for i := uint64(0); i < m && r.err == nil; i++ {
		op, s := opcode(r.u64()), driver.Stream(r.u64())
		if i == 0 {
			first = s
		} else if s != first {
			return nil, fmt.Errorf("%w: failures of pipelined operations reported on streams %#x and %#x, one call reports one stream's",
				errMalformed, uint64(first), uint64(s))
		}
		err := r.decodeErr()
		if r.err != nil {
			return nil, err
		}
		r.async = append(r.async, &AsyncError{Op: op.String(), Stream: s, Err: err})
	}
	if r.err != nil {
		return nil, r.err
	}
	switch status {
	case replyOK:
		return r, nil
	case replyErr:
		err := r.decodeErr()
		if r.err == nil {
			return r, err
		}
		return nil, err
	}
	return nil, errMalformed
}
