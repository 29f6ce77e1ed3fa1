// Package hostregion finds which registered host buffer a byte slice lies
// in. The cpu and cuda drivers use it to tell pinned memory (from their
// HostAlloc) from pageable memory, and the plugin host to find the shared
// region behind a buffer; one lookup, three users.
package hostregion

import (
	"slices"
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
