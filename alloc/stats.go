package alloc

import (
	"fmt"
	"sync/atomic"
)

// Stats is a snapshot of an allocator's counters.
type Stats struct {
	BytesInUse    int64  `json:"bytes_in_use"`   // bytes of live buffers, as requested
	BytesReserved int64  `json:"bytes_reserved"` // bytes held from the driver: live, cached and graph-owned
	BytesCached   int64  `json:"bytes_cached"`   // bytes in the pool's free lists
	PeakInUse     int64  `json:"peak_in_use"`
	PeakReserved  int64  `json:"peak_reserved"`
	LiveBuffers   int    `json:"live_buffers"`
	Allocs        uint64 `json:"allocs"` // successful Alloc, AllocSync and workspace allocations
	Frees         uint64 `json:"frees"`
	PoolHits      uint64 `json:"pool_hits"`
	PoolMisses    uint64 `json:"pool_misses"`
	DriverAllocs  uint64 `json:"driver_allocs"`
	DriverFrees   uint64 `json:"driver_frees"`
	CaptureAllocs uint64 `json:"capture_allocs"` // allocations made inside captures, all captures
	Captures      uint64 `json:"captures"`       // captures ended with a graph
	FailedCapture uint64 `json:"failed_capture"` // captures that ended without a graph
	LiveGraphs    int    `json:"live_graphs"`
	HostBuffers   int    `json:"host_buffers"`
	HostBytes     int64  `json:"host_bytes"`
	Timeouts      uint64 `json:"timeouts"` // watchdog expiries
}

func (s Stats) String() string {
	return fmt.Sprintf("in use %d B in %d buffers (peak %d B), reserved %d B (peak %d B), cached %d B, graphs %d, host %d B in %d buffers",
		s.BytesInUse, s.LiveBuffers, s.PeakInUse, s.BytesReserved, s.PeakReserved, s.BytesCached, s.LiveGraphs, s.HostBytes, s.HostBuffers)
}

// meter is a byte count and its peak, kept with atomics: the lock-free
// lane publishes what it allocated into it without a.mu (shard.go).
type meter struct {
	cur, peak atomic.Int64
}

func (m *meter) add(n int64) {
	v := m.cur.Add(n)
	for p := m.peak.Load(); v > p && !m.peak.CompareAndSwap(p, v); p = m.peak.Load() {
	}
}

func (s *Stats) addReserved(n int64) {
	s.BytesReserved += n
	if s.BytesReserved > s.PeakReserved {
		s.PeakReserved = s.BytesReserved
	}
}
