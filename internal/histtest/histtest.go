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

// Recording is an allocator named name on a cpu device of limit bytes,
// its history on and written to the file returned at each out-of-memory
// error; the test's cleanup closes both (the caller's Close first).
func Recording(t testing.TB, limit int64, name string) (*alloc.Allocator, string) {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	file := filepath.Join(t.TempDir(), "history.json")
	a, err := alloc.New(d, alloc.Options{Name: name, History: 10000, HistoryFile: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, file
}

// WriteOOMHistory runs a step that fragments an 8 MiB cpu device and
// then fails to allocate OOMRequest, with the history on and
// Options.HistoryFile set, as an engine in the field would; it returns the
// file the allocator wrote at the out-of-memory error.
func WriteOOMHistory(t testing.TB) string {
	t.Helper()
	a, file := Recording(t, 8<<20, "field-engine")
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

// GraphBackend is the backend config WriteGraphOOMHistory's history was
// made on: a device of 16 MiB.
const GraphBackend = "cpu:memory_limit=16MiB"

// WriteGraphOOMHistory runs an engine's step on a 16 MiB cpu device as
// one that captures its hot loop does: a workspace reserved, an AllocSync
// buffer, two captures into one graph pool (the second reusing what the
// first freed), the pool closed, a capture of its own memory (a
// temporary freed in the graph, an output kept), another one closed; then
// eager 1 MiB buffers until an allocation fails, with the history on and
// Options.HistoryFile set. It returns the file the allocator wrote at the
// out-of-memory error.
func WriteGraphOOMHistory(t testing.TB) string {
	t.Helper()
	a, file := Recording(t, 16<<20, "graph-engine")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustBuf := func(b alloc.Buffer, err error) alloc.Buffer {
		t.Helper()
		must(err)
		return b
	}
	mustBuf(a.Workspace("scratch", 1<<20))
	held := []alloc.Buffer{mustBuf(a.AllocSync(3 << 19))}
	var warm []alloc.Buffer // the eager run before capturing: the cache the pool borrows
	for range 4 {
		warm = append(warm, mustBuf(a.Alloc(512<<10)))
	}
	for _, b := range warm {
		must(a.Free(b))
	}
	step := func(gp *alloc.GraphPool, tmp, out int64) *alloc.Graph {
		t.Helper()
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
			b, err := a.Alloc(tmp)
			if err != nil {
				return err
			}
			if err := a.Free(b); err != nil {
				return err
			}
			_, err = a.Alloc(out)
			return err
		})
		must(err)
		return g
	}
	gp := a.NewGraphPool()
	graphs := []*alloc.Graph{step(gp, 1<<20, 256<<10), step(gp, 1<<20, 256<<10)}
	must(gp.Close())
	graphs = append(graphs, step(nil, 1<<20, 512<<10))
	must(step(nil, 512<<10, 256<<10).Close())
	for {
		b, err := a.Alloc(1 << 20)
		if errors.Is(err, alloc.ErrOutOfMemory) {
			break
		}
		held = append(held, mustBuf(b, err))
	}
	for _, g := range graphs {
		must(g.Close())
	}
	for _, b := range held {
		must(a.Free(b))
	}
	must(a.ReleaseWorkspace("scratch"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no history written at the out-of-memory error: %v", err)
	}
	return file
}
