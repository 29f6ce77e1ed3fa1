// Package hostregion finds which registered host buffer a byte slice lies
// in. The cpu and GPU (internal/gpurt) drivers keep their HostAlloc
// buffers in a Set, to tell pinned memory from pageable memory, and the
// plugin's host and child keep their shared regions in one, to find the
// region behind a buffer; one table, four users.
package hostregion

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Addr is the address of b's first byte.
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Find returns the index of the region that holds all of b, among regions
// sorted by start address that do not overlap, and b's offset in it; -1
// when b (empty, or pageable, or crossing a region's end) is in none.
func Find[R any](regions []R, start, size func(R) uintptr, b []byte) (int, uintptr) {
	if len(b) == 0 {
		return -1, 0
	}
	p := Addr(b)
	i, found := slices.BinarySearchFunc(regions, p, func(r R, p uintptr) int {
		switch s := start(r); {
		case s < p:
			return -1
		case s > p:
			return 1
		}
		return 0
	})
	if !found {
		i-- // the region starting before p, if any
	}
	if i < 0 {
		return -1, 0
	}
	s, n := start(regions[i]), size(regions[i])
	if p+uintptr(len(b)) > s+n || p+uintptr(len(b)) < p {
		return -1, 0
	}
	return i, p - s
}

// Region is a registered buffer as Set sees it: where it starts and how
// many bytes it holds.
type Region interface {
	Start() uintptr
	Len() int
}

// Set is a table of registered buffers (a driver's HostAlloc buffers, the
// plugin's shared regions), sorted by start address: read without a lock
// on every copy (Find, Holds), through a slice replaced copy-on-write;
// Insert, Remove and Take lock out each other. The zero value is empty.
type Set[R Region] struct {
	mu      sync.Mutex
	regions atomic.Pointer[[]R]
}

func (s *Set[R]) all() []R {
	if p := s.regions.Load(); p != nil {
		return *p
	}
	return nil
}

// Find returns the buffer that holds all of b and b's offset in it; false
// when b (empty, pageable, or crossing a buffer's end) is in none.
func (s *Set[R]) Find(b []byte) (R, uintptr, bool) {
	rs := s.all()
	i, off := Find(rs, R.Start, func(r R) uintptr { return uintptr(r.Len()) }, b)
	if i < 0 {
		var none R
		return none, 0, false
	}
	return rs[i], off, true
}

// Holds reports whether b lies inside one registered buffer: pinned
// memory, as the drivers' async copies require.
func (s *Set[R]) Holds(b []byte) bool {
	_, _, ok := s.Find(b)
	return ok
}

// Insert registers r, which overlaps no registered buffer.
func (s *Set[R]) Insert(r R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.all()
	i, _ := slices.BinarySearchFunc(rs, r.Start(), func(x R, p uintptr) int {
		if x.Start() < p {
			return -1
		}
		return 1
	})
	rs = slices.Insert(slices.Clip(rs), i, r)
	s.regions.Store(&rs)
}

// Remove unregisters and returns the buffer b is, passed exactly as
// registered (its start and its length); false when it is none (an empty
// slice, a part of a buffer, or one already removed).
func (s *Set[R]) Remove(b []byte) (R, bool) {
	if len(b) == 0 {
		var none R
		return none, false
	}
	return s.RemoveWhere(func(r R) bool { return r.Start() == Addr(b) && r.Len() == len(b) })
}

// RemoveWhere unregisters and returns the first buffer match accepts;
// false when it accepts none.
func (s *Set[R]) RemoveWhere(match func(R) bool) (R, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.all()
	i := slices.IndexFunc(rs, match)
	if i < 0 {
		var none R
		return none, false
	}
	r := rs[i]
	rs = slices.Delete(slices.Clone(rs), i, i+1)
	s.regions.Store(&rs)
	return r, true
}

// Take unregisters every buffer and returns them (Close).
func (s *Set[R]) Take() []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.regions.Swap(nil); p != nil {
		return *p
	}
	return nil
}

// Any reports whether match accepts a registered buffer.
func (s *Set[R]) Any(match func(R) bool) bool { return slices.ContainsFunc(s.all(), match) }

// Overlaps reports whether any byte of b lies in a registered buffer.
func (s *Set[R]) Overlaps(b []byte) bool {
	lo, hi := Addr(b), Addr(b)+uintptr(len(b))
	return slices.ContainsFunc(s.all(), func(r R) bool { return r.Start() < hi && lo < r.Start()+uintptr(r.Len()) })
}

// Len is how many buffers are registered.
func (s *Set[R]) Len() int { return len(s.all()) }
