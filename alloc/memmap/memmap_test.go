package memmap_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// BlockStates is the caller's: changing it changes no later answer.
func TestBlockStatesIsFresh(t *testing.T) {
	s := memmap.BlockStates()
	want := append([]memmap.BlockState(nil), s...)
	s[0] = "changed"
	got := memmap.BlockStates()
	if len(got) != 6 || got[0] != memmap.BlockLive {
		t.Fatalf("BlockStates() = %v after a caller changed its copy, want %v", got, want)
	}
}
