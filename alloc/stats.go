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

// counters holds every counter an allocator keeps: a.stats. Stats is
// derived from it (statsLocked), with the figures read off state rather
// than kept: bytes cached and live buffers (the pool, the live lists, the
// lane's shards), live graphs, watchdog expiries. The fields below are
// changed under a.mu, except inUse, which the lane also changes under a
// shard's lock (shard.go); the lane's own counts live in its shards.
type counters struct {
	BytesReserved int64
	PeakReserved  int64
	Allocs        uint64 // through a.mu; the lane's are in its shards
	Frees         uint64
	PoolHits      uint64
	PoolMisses    uint64
	DriverAllocs  uint64
	DriverFrees   uint64
	CaptureAllocs uint64
	Captures      uint64
	FailedCapture uint64
	HostBuffers   int
	HostBytes     int64

	inUse meter // bytes of live buffers and their peak
}

// meter is a byte count and its peak, kept with atomics: the lane
// publishes what it allocated into it without a.mu (shard.go).
type meter struct {
	cur, peak atomic.Int64
}

func (m *meter) add(n int64) {
	v := m.cur.Add(n)
	for p := m.peak.Load(); v > p && !m.peak.CompareAndSwap(p, v); p = m.peak.Load() {
	}
}

// addReserved counts n more bytes held from the driver.
func (c *counters) addReserved(n int64) {
	c.BytesReserved += n
	if c.BytesReserved > c.PeakReserved {
		c.PeakReserved = c.BytesReserved
	}
}

// givenBackLocked counts n bytes of one driver allocation as given back.
func (c *counters) givenBackLocked(n int64) {
	c.DriverFrees++
	c.BytesReserved -= n
}

// Stats returns a snapshot of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statsLocked()
}

// statsLocked derives Stats from the counters and the figures read off
// state. Caller holds a.mu, which stops the locked path; the shards'
// locks, all held at once in lane.addStatsLocked, stop the lane: so every
// figure, the bytes in use included (the lane publishes into them), is of
// one moment.
func (a *Allocator) statsLocked() Stats {
	c := &a.stats
	s := Stats{
		BytesReserved: c.BytesReserved,
		BytesCached:   a.pool.cached,
		PeakReserved:  c.PeakReserved,
		LiveBuffers:   a.live.n + a.pooledLive,
		Allocs:        c.Allocs,
		Frees:         c.Frees,
		PoolHits:      c.PoolHits,
		PoolMisses:    c.PoolMisses,
		DriverAllocs:  c.DriverAllocs,
		DriverFrees:   c.DriverFrees,
		CaptureAllocs: c.CaptureAllocs,
		Captures:      c.Captures,
		FailedCapture: c.FailedCapture,
		LiveGraphs:    len(a.graphs),
		HostBuffers:   c.HostBuffers,
		HostBytes:     c.HostBytes,
		Timeouts:      a.guard.watchdog.expired.Load(),
	}
	a.lane.addStatsLocked(&s, &c.inUse)
	return s
}
