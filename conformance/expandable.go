package conformance

import (
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// expandableGroups are the groups run again with expandable segments on
// (alloc.Options.ExpandableSegments): allocation, free, memset and copies,
// capture and replay, aliasing, failure cleanup, workspaces, concurrency,
// Close and leaks. The rest (the watchdog, the truth table's refusals,
// collectives, bad input, the probe) do not reach the pool's growth.
var expandableGroups = []string{
	"Eager", "CrossAllocator", "Replay", "Aliasing", "FailedCapture", "WithCapture",
	"Workspace", "Concurrency", "InFlight", "Close", "Leaks",
}

// RunExpandable runs expandableGroups with every allocator the suite makes
// growing expandable segments, on a backend whose driver implements
// alloc.VirtualMemory; on any other it skips, saying so.
func RunExpandable(t *testing.T, open Factory) {
	s := &suite{open: closing(open), expandable: true}
	if vm, ok := s.openDriver(t).(alloc.VirtualMemory); !ok || vm.MapGranularity() <= 0 {
		t.Skip("the backend's driver has no virtual memory management (alloc.VirtualMemory): no expandable segments")
	}
	for _, g := range groups {
		if slices.Contains(expandableGroups, g.name) {
			t.Run(g.name, func(t *testing.T) { g.run(s, t) })
		}
	}
}
