// Package histtest makes allocation histories for the tests of the tools
// that read them back (cmd/allocview, cmd/allocreplay): an allocator on
// the cpu backend runs into an out-of-memory error with its history on,
// and the history is written where the tools read it.
package histtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// Backend is the backend config the history was made on: a device of
// 8 MiB.
const Backend = "cpu:memory_limit=8MiB"

// OOMRequest is the request that failed: 2 MiB, with 4 MiB cached in
// 1 MiB pieces.
const OOMRequest = 2 << 20

// WriteOOMHistory runs a step that fragments an 8 MiB cpu device and
// then fails to allocate OOMRequest, with the history on and
// Options.HistoryFile set, as an engine in the field would; it returns the
// file the allocator wrote at the out-of-memory error.
func WriteOOMHistory(t testing.TB) string {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	file := filepath.Join(t.TempDir(), "history.json")
	a, err := alloc.New(d, alloc.Options{Name: "field-engine", History: 10000, HistoryFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var bs []alloc.Buffer
	for range 8 { // four 2 MiB segments, the device full
		b, err := a.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	for i := 0; i < len(bs); i += 2 { // 1 MiB free in each segment
		if err := a.Free(bs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Alloc(OOMRequest); !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("the step did not run out of memory: %v", err)
	}
	for i := 1; i < len(bs); i += 2 {
		if err := a.Free(bs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no history written at the out-of-memory error: %v", err)
	}
	return file
}
