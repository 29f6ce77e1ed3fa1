package memmap_test

import (
	"os"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// BlockStates is the caller's: changing it changes no later answer.
func TestBlockStatesIsFresh(t *testing.T) {
	s := memmap.BlockStates()
	want := append([]memmap.BlockState(nil), s...)
	s[0] = "changed"
	got := memmap.BlockStates()
	if len(got) != len(want) || got[0] != memmap.BlockLive {
		t.Fatalf("BlockStates() = %v after a caller changed its copy, want %v", got, want)
	}
}

// Every state says what it means in one short sentence (the segment
// map's legend draws it on one line), and docs/device-memory.md's table
// of states says the same words.
func TestEveryStateHasAMeaning(t *testing.T) {
	doc, err := os.ReadFile("../../docs/device-memory.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, st := range memmap.BlockStates() {
		m := st.Meaning()
		if m == "" || len(m) > 80 || !strings.HasSuffix(m, ".") || seen[m] {
			t.Errorf("%s: meaning %q: want one sentence of at most 80 bytes, its own", st, m)
		}
		seen[m] = true
		if row := "| " + string(st) + " |"; !strings.Contains(string(doc), row) || !strings.Contains(string(doc), m) {
			t.Errorf("docs/device-memory.md has no row %q saying %q", row, m)
		}
	}
	if m := memmap.BlockState("freed").Meaning(); m != "" {
		t.Errorf("an unknown state means %q, want nothing", m)
	}
}
