package alloc

// CaptureState is the allocator's view of its stream, combining its own flag
// with the driver's report (the driver is the authority: the guard's
// classify folds the two).
type CaptureState int

const (
	// StateNone: no capture on the stream.
	StateNone CaptureState = iota
	// StateActive: a capture this allocator started is recording.
	StateActive
	// StateExternal: the driver reports a capture this allocator did not
	// start (the vendor API was called directly).
	StateExternal
	// StateInvalidated: the driver invalidated the capture, or it was ended
	// behind the allocator's back, or the watchdog abandoned it.
	StateInvalidated
)

func (s CaptureState) String() string {
	switch s {
	case StateNone:
		return "none"
	case StateActive:
		return "active"
	case StateExternal:
		return "external"
	case StateInvalidated:
		return "invalidated"
	}
	return "unknown"
}
