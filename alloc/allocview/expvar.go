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
	// Fragmentation is memmap.Snapshot.Fragmentation: reserved over in
	// use, graphs' memory (GraphBytes) left out of both, 0 when nothing
	// outside graphs is in use. DeviceTotal and DeviceFree are the
	// snapshot's DeviceMemory and DeviceFree (absent where the driver
	// cannot tell).
	Fragmentation float64 `json:"fragmentation"`
	GraphBytes    int64   `json:"graph_bytes"`
	DeviceTotal   int64   `json:"device_total"`
	DeviceFree    *int64  `json:"device_free,omitempty"`
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
		v.Allocators[s.Allocator] = AllocatorVars{Backend: s.Backend, Device: s.Device, Stats: alloc.Stats(s.Stats), Bytes: s.Bytes,
			Fragmentation: s.Fragmentation(), GraphBytes: s.GraphBytes(), DeviceTotal: s.DeviceMemory, DeviceFree: s.DeviceFree}
	}
	return v
}
