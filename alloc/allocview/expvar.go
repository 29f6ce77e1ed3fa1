package allocview

import "github.com/capalloc/capalloc/alloc"

// AllocatorVars is one allocator's entry in the "capalloc" expvar.
type AllocatorVars struct {
	Backend string                     `json:"backend"`
	Device  string                     `json:"device"`
	Stats   alloc.Stats                `json:"stats"`
	Bytes   map[alloc.BlockState]int64 `json:"bytes"` // alloc.Allocator.BytesByState
}

// Vars is the "capalloc" expvar's value: every open allocator's counters,
// by name, and the profile's sampling rate; like the views, from a
// snapshot at most a second old.
func Vars() any {
	v := struct {
		ProfileRate int                      `json:"profile_rate"`
		Allocators  map[string]AllocatorVars `json:"allocators"`
	}{alloc.ProfileRate(), map[string]AllocatorVars{}}
	for _, s := range snapshots(alloc.Allocators()) { // cached, as the views'
		v.Allocators[s.Allocator] = AllocatorVars{Backend: s.Backend, Device: s.Device, Stats: s.Stats, Bytes: s.Bytes}
	}
	return v
}
