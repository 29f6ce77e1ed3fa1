package alloc

import "github.com/capalloc/capalloc/alloc/memmap"

// Stats is a snapshot of an allocator's counters (Allocator.Stats). Its
// one definition is the snapshot data's, so a Snapshot carries the same
// type.
type Stats = memmap.Stats

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
	// OutOfMemory: allocations that failed for lack of memory (oom.go);
	// ReclaimRetries: the reclaim ladder's retries (pool_reclaim.go).
	OutOfMemory    uint64
	ReclaimRetries uint64

	inUse meter // bytes of live buffers and their peak

	// limit bounds BytesReserved (limit.go): taken before each driver call
	// that reserves, put back by givenBackLocked. Set once, in New.
	limit memLimit

	hist *history // the allocation timeline (history.go): nil when off; set once, in New
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
	s.OutOfMemory, s.ReclaimRetries = c.OutOfMemory, c.ReclaimRetries
	s.HostCached, s.HostPins = a.host.cached, a.host.pins
	s.MemoryLimit = c.limit.max
	a.lane.addStatsLocked(&s, &c.inUse)
	return s
}
