package alloc

import "fmt"

// Stats is a snapshot of an allocator's counters.
type Stats struct {
	BytesInUse    int64 // bytes of live buffers, as requested
	BytesReserved int64 // bytes held from the driver: live, cached and graph-owned
	BytesCached   int64 // bytes in the pool's free lists
	PeakInUse     int64
	PeakReserved  int64
	LiveBuffers   int
	Allocs        uint64 // successful Alloc, AllocSync and workspace allocations
	Frees         uint64
	PoolHits      uint64
	PoolMisses    uint64
	DriverAllocs  uint64
	DriverFrees   uint64
	CaptureAllocs uint64 // allocations made inside captures, all captures
	Captures      uint64 // captures ended with a graph
	FailedCapture uint64 // captures that ended without a graph
	LiveGraphs    int
	HostBuffers   int
	HostBytes     int64
	Timeouts      uint64 // watchdog expiries
}

func (s Stats) String() string {
	return fmt.Sprintf("in use %d B in %d buffers (peak %d B), reserved %d B (peak %d B), cached %d B, graphs %d, host %d B in %d buffers",
		s.BytesInUse, s.LiveBuffers, s.PeakInUse, s.BytesReserved, s.PeakReserved, s.BytesCached, s.LiveGraphs, s.HostBytes, s.HostBuffers)
}

func (s *Stats) addInUse(n int64) {
	s.BytesInUse += n
	if s.BytesInUse > s.PeakInUse {
		s.PeakInUse = s.BytesInUse
	}
}

func (s *Stats) addReserved(n int64) {
	s.BytesReserved += n
	if s.BytesReserved > s.PeakReserved {
		s.PeakReserved = s.BytesReserved
	}
}
