package alloc

import (
	"reflect"
	"testing"
	"unsafe"
)

// cacheLine is the line size of the machines the library runs on (x86-64
// and arm64 alike).
const cacheLine = 64

// A block record is a whole number of cache lines, so records allocated
// side by side never share one (buffer.go, block's pad): a field added to
// block changes its size, and the pad must change with it.
func TestBlockFillsWholeCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(block{}); n%cacheLine != 0 {
		t.Fatalf("block is %d B, not a multiple of %d: adjust its pad by %d B", n, cacheLine, cacheLine-n%cacheLine)
	}
}

// A history ring slot is four cache lines, its fields before the stack
// the first (history.go, event): what docs/allocation-history.md says an
// event kept costs, and what the read-ahead in record assumes.
func TestHistoryEventFillsFourCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(event{}); n != 4*cacheLine {
		t.Fatalf("a history event is %d B, not %d", n, 4*cacheLine)
	}
	if off := unsafe.Offsetof(event{}.pcs); off != cacheLine {
		t.Fatalf("a history event's stack starts at byte %d, not %d", off, cacheLine)
	}
}

// A Buffer has at most four fields, so the compiler keeps it in registers
// and Alloc's frames return it without a copy through memory (buffer.go):
// a field added to Buffer belongs in one of the four (as a view's flag is
// in gen).
func TestBufferFitsInRegisters(t *testing.T) {
	if n := reflect.TypeFor[Buffer]().NumField(); n > 4 {
		t.Fatalf("Buffer has %d fields: at most 4 stay in registers", n)
	}
}
