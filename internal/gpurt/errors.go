package gpurt

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrWrongThread is the sentinel of a capture ended on another thread than
// the one that began it (908 in both runtimes): it matches both
// driver.ErrCaptureWrongThread and driver.ErrCaptureIllegalOp.
var ErrWrongThread = fmt.Errorf("%w (%w)", driver.ErrCaptureWrongThread, driver.ErrCaptureIllegalOp)

// Codes lists, per sentinel, the runtime's error codes that mean it: the
// vendor's data, from its header's comments.
type Codes struct {
	OutOfMemory   []int // driver.ErrOutOfMemory
	IllegalOp     []int // driver.ErrCaptureIllegalOp: refused because a capture is active
	WrongThread   []int // ErrWrongThread: the capture stays active
	Invalidated   []int // driver.ErrCaptureInvalidated
	Unavailable   []int // driver.ErrBackendUnavailable: no usable driver or device
	InvalidValue  []int // driver.ErrInvalidValue: a bad argument, handle or state
	DriverDefault error // every other code; nil means driver.ErrDriver
}

// Sentinels maps an error code to the alloc sentinel it means.
type Sentinels struct {
	m   map[int]error
	def error
}

// NewSentinels builds the table. A code listed under two sentinels is a
// bug in the vendor's data: it panics at package initialization.
func NewSentinels(c Codes) *Sentinels {
	s := &Sentinels{m: map[int]error{}, def: c.DriverDefault}
	if s.def == nil {
		s.def = driver.ErrDriver
	}
	for _, g := range []struct {
		codes []int
		err   error
	}{
		{c.OutOfMemory, driver.ErrOutOfMemory},
		{c.IllegalOp, driver.ErrCaptureIllegalOp},
		{c.WrongThread, ErrWrongThread},
		{c.Invalidated, driver.ErrCaptureInvalidated},
		{c.Unavailable, driver.ErrBackendUnavailable},
		{c.InvalidValue, driver.ErrInvalidValue},
	} {
		for _, code := range g.codes {
			if prev, dup := s.m[code]; dup {
				panic(fmt.Sprintf("gpurt: code %d mapped to %v and %v", code, prev, g.err))
			}
			s.m[code] = g.err
		}
	}
	return s
}

// For is the sentinel code means.
func (s *Sentinels) For(code int) error {
	if err, ok := s.m[code]; ok {
		return err
	}
	return s.def
}
