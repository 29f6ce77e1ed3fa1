package allocview

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// stepHistory is an engine's history as the timeline must show it: 24 MiB
// of weights, then steps that each allocate and free 1 MiB, every tenth
// of them captured (a capture of two events among thousands).
func stepHistory(steps int) memmap.History {
	h := memmap.History{Allocator: "steps", Capacity: 1 << 20,
		Stacks: [][]memmap.Frame{{{Function: "main.weights", File: "w.go", Line: 1}}, {{Function: "main.step", File: "s.go", Line: 2}}}}
	var seq uint64
	var inUse int64
	add := func(e memmap.Event) {
		e.Seq, e.InUse, e.Reserved = seq, inUse, 32<<20
		h.Events = append(h.Events, e)
		seq++
	}
	inUse += 24 << 20
	add(memmap.Event{Kind: memmap.EventAlloc, Addr: 0x1000, Size: 24 << 20, Stack: 0})
	for i := range steps {
		if i%10 == 0 {
			add(memmap.Event{Kind: memmap.EventCaptureBegin, Stack: -1})
		}
		inUse += 1 << 20
		add(memmap.Event{Kind: memmap.EventAlloc, Addr: driver.DevicePtr(0x10000000 + i<<20), Size: 1 << 20, Stack: 1})
		inUse -= 1 << 20
		add(memmap.Event{Kind: memmap.EventFree, Addr: driver.DevicePtr(0x10000000 + i<<20), Size: 1 << 20, Stack: 1})
		if i%10 == 0 {
			add(memmap.Event{Kind: memmap.EventCaptureEnd, Stack: -1})
		}
	}
	h.Recorded = seq
	return h
}

// Captures are shaded while they record: by their share of the events,
// not a column each, so a chart of thousands of events with a capture
// every few steps is not one shaded block.
func TestCapturesShadedOnlyWhileTheyRecord(t *testing.T) {
	h := stepHistory(3000) // 6,601 events, 300 captures of 4 events
	var buf bytes.Buffer
	tl := newTimeline(h, tlColumns)
	writeTimelineSVG(&buf, tl, viewLinks{page: timelinePage{offline: true}, all: h})
	widths := regexp.MustCompile(`<rect x="[0-9.]+" y="\d+" width="([0-9.]+)" height="\d+" fill="#e3eefa">`).FindAllStringSubmatch(buf.String(), -1)
	require.Len(t, widths, 300)
	var shaded float64
	for _, w := range widths {
		x, err := strconv.ParseFloat(w[1], 64)
		require.NoError(t, err)
		shaded += x
	}
	axis := float64(tlRight - tlLeft)
	want := axis * 300 * 4 / float64(len(h.Events)) // 300 captures of 4 events each
	require.InDelta(t, want, shaded, 300*0.4+1, "shading spans the captures' events (%.0f of %.0f units)", shaded, axis)
	require.Less(t, shaded, axis/4)
}

// The baseline out, the axis spans the step: 24 MiB of weights held
// throughout leave the series and the axis, and what changes, 1 MiB, is
// what the chart's top reads.
func TestBaselineOutScalesToTheStep(t *testing.T) {
	h := stepHistory(50)
	v := TimelineView{From: 1, NoBaseline: true} // after the weights' allocation
	tl := newTimeline(v.apply(h), tlColumns)
	base := takeBaseline(tl)
	require.EqualValues(t, 24<<20, base)
	require.EqualValues(t, 1<<20, tl.maxBytes, "the axis spans the step, not the weights")
	for _, s := range tl.sites {
		for _, x := range s.values {
			require.GreaterOrEqual(t, x, int64(0))
		}
	}
}

// A site filter keeps that site's buffers, bytes in use recounted; a
// range keeps its events and draws what was allocated before it as one
// series.
func TestTimelineViewApply(t *testing.T) {
	h := stepHistory(20)
	steps := TimelineView{Site: "main.step"}.apply(h)
	for _, e := range steps.Events {
		require.Zero(t, e.Reserved)
		if e.Kind == memmap.EventAlloc {
			require.Equal(t, 1, e.Stack)
			require.EqualValues(t, 1<<20, e.InUse)
		}
	}
	part := TimelineView{From: 10, To: 20}.apply(h)
	require.EqualValues(t, 10, part.Events[0].Seq)
	require.EqualValues(t, 20, part.Events[len(part.Events)-1].Seq)
	tl := newTimeline(part, tlColumns)
	var before *timelineSite
	for _, s := range tl.sites {
		if s.detail == "" {
			before = s
		}
	}
	require.NotNil(t, before)
	require.EqualValues(t, 24<<20, before.peak, "the weights, allocated before the range")
}
