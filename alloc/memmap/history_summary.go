package memmap

import (
	"fmt"
	"strings"
	"time"
)

// Summary is the history as text, for a person reading an out-of-memory
// offline (cmd/allocview): what it covers, its allocations and frees,
// the peaks of bytes in use and reserved and the events they came at, the
// captures, and every out-of-memory error with its request and reason.
func (h History) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "capalloc allocation history: allocator %q, backend %q, device %q\n", h.Allocator, h.Backend, h.Device)
	if h.Capacity == 0 {
		b.WriteString("history off (Options.History 0): nothing recorded\n")
		return b.String()
	}
	n := len(h.Events)
	fmt.Fprintf(&b, "recording began %s; keeps %d events, %d recorded", h.Start.UTC().Format("2006-01-02 15:04:05.000Z"), h.Capacity, h.Recorded)
	if n == 0 {
		b.WriteString("; none kept\n")
		return b.String()
	}
	first, last := h.Events[0], h.Events[n-1]
	fmt.Fprintf(&b, "; these are events %d to %d, %s to %s after it began\n", first.Seq, last.Seq, roundMS(first.Time), roundMS(last.Time))
	var allocs, frees, maps, unmaps, captures, failed, closes int
	var allocBytes int64
	peakUse, peakRes := first, first
	var ooms []Event
	for _, e := range h.Events {
		switch e.Kind {
		case EventAlloc:
			allocs++
			allocBytes += e.Size
		case EventFree:
			frees++
		case EventSegmentMap:
			maps++
		case EventSegmentUnmap:
			unmaps++
		case EventCaptureBegin:
			captures++
		case EventCaptureEnd:
			if strings.HasPrefix(e.Detail, "failed") {
				failed++
			}
		case EventGraphClose:
			closes++
		case EventOutOfMemory:
			ooms = append(ooms, e)
		}
		if e.InUse > peakUse.InUse {
			peakUse = e
		}
		if e.Reserved > peakRes.Reserved {
			peakRes = e
		}
	}
	fmt.Fprintf(&b, "allocations %d (%s), frees %d; segments mapped %d, given back %d\n", allocs, SizeText(allocBytes), frees, maps, unmaps)
	fmt.Fprintf(&b, "captures %d (%d failed), graphs closed %d\n", captures, failed, closes)
	fmt.Fprintf(&b, "peak in use %s at event %d; peak reserved %s at event %d\n", SizeText(peakUse.InUse), peakUse.Seq, SizeText(peakRes.Reserved), peakRes.Seq)
	fmt.Fprintf(&b, "at the last event: in use %s, reserved %s\n", SizeText(last.InUse), SizeText(last.Reserved))
	fmt.Fprintf(&b, "out-of-memory errors %d\n", len(ooms))
	for _, e := range ooms {
		req := "a request of unknown size"
		if e.Size >= 0 {
			req = fmt.Sprintf("a request of %s (%d B)", SizeText(e.Size), e.Size)
		}
		fmt.Fprintf(&b, "  event %d at %s: %s, with %s in use and %s reserved: %q\n", e.Seq, roundMS(e.Time), req, SizeText(e.InUse), SizeText(e.Reserved), e.Detail)
	}
	return b.String()
}

func roundMS(d time.Duration) string { return d.Round(time.Millisecond).String() }
