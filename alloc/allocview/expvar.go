package allocview

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// AllocatorVars is one allocator's entry in the "capalloc" expvar.
type AllocatorVars struct {
	Backend string                      `json:"backend"`
	Device  string                      `json:"device"`
	Stats   alloc.Stats                 `json:"stats"`
	Bytes   map[memmap.BlockState]int64 `json:"bytes"` // as the snapshot's Bytes: its cached states sum to Stats.BytesCached
}

// Vars is the "capalloc" expvar's value: every open allocator's counters,
// by name, and the profile's sampling rate; like the views, from a
// snapshot at most a second old.
func Vars() any {
	v := struct {
		ProfileRate int                      `json:"profile_rate"`
		Allocators  map[string]AllocatorVars `json:"allocators"`
	}{registry.ProfileRate(), map[string]AllocatorVars{}}
	for _, s := range snapshots(registry.Allocators()) { // cached, as the views'
		v.Allocators[s.Allocator] = AllocatorVars{Backend: s.Backend, Device: s.Device, Stats: alloc.Stats(s.Stats), Bytes: s.Bytes}
	}
	return v
}
