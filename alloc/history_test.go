package alloc_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

func readHistory(t *testing.T, a *alloc.Allocator) memmap.History {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, a.WriteHistory(&buf))
	var h memmap.History
	require.NoError(t, json.Unmarshal(buf.Bytes(), &h))
	return h
}

// kinds lists the events' kinds, leaving out segment maps and unmaps
// (how the pool grows is its business).
func kinds(h memmap.History) []string {
	var out []string
	for _, e := range h.Events {
		if e.Kind != memmap.EventSegmentMap && e.Kind != memmap.EventSegmentUnmap {
			out = append(out, string(e.Kind)+" "+string(e.State))
		}
	}
	return out
}

// Every kind of event is recorded, in order, each with its address,
// size, state and the bytes in use and reserved after it; the stacks
// start at the test's calls, inlined wrappers included.
func TestHistoryRecordsEvents(t *testing.T) {
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 1000})
	b, err := inlinedTwice(a, 1<<20)
	require.NoError(t, err)
	s, err := a.AllocSync(64 << 10)
	require.NoError(t, err)
	ws, err := a.Workspace("attn", 256<<10)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
	require.NoError(t, a.Free(s))
	var inGraph alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		var err error
		inGraph, err = a.Alloc(128 << 10)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, g.Close())
	_, err = a.Alloc(1 << 30)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, a.ReleaseWorkspace("attn"))
	require.NoError(t, a.Trim())

	h := readHistory(t, a)
	require.Equal(t, 1000, h.Capacity)
	require.EqualValues(t, len(h.Events), h.Recorded)
	require.Equal(t, []string{
		"alloc live", "alloc live", "alloc workspace", // Alloc, AllocSync, Workspace
		"free live", "free live",
		"capture-begin ", "alloc graph-owned", "capture-end ",
		"graph-close ", "free graph-owned",
		"out-of-memory ",
		"free live", // ReleaseWorkspace (unnamed before its free)
	}, kinds(h))
	require.Equal(t, memmap.HistoryFormat, h.Format)
	at := map[memmap.EventKind][]memmap.Event{}
	for i, e := range h.Events {
		require.EqualValues(t, i, e.Seq)
		at[e.Kind] = append(at[e.Kind], e)
	}
	allocs := at[memmap.EventAlloc]
	require.Equal(t, []driver.DevicePtr{b.Ptr(), s.Ptr(), ws.Ptr(), inGraph.Ptr()},
		[]driver.DevicePtr{allocs[0].Addr, allocs[1].Addr, allocs[2].Addr, allocs[3].Addr})
	require.Equal(t, []int64{1 << 20, 64 << 10, 256 << 10, 128 << 10},
		[]int64{allocs[0].Size, allocs[1].Size, allocs[2].Size, allocs[3].Size})
	require.EqualValues(t, 1<<20+64<<10+256<<10, allocs[2].InUse)
	// What each allocation was, and whose: the call, the graph.
	require.Equal(t, []memmap.AllocVia{"", memmap.ViaAllocSync, memmap.ViaWorkspace, ""},
		[]memmap.AllocVia{allocs[0].Via, allocs[1].Via, allocs[2].Via, allocs[3].Via})
	require.Equal(t, "attn", allocs[2].Workspace)
	require.Empty(t, allocs[2].Detail)
	require.Equal(t, []int{0, 0, 0, g.ID()}, []int{allocs[0].Graph, allocs[1].Graph, allocs[2].Graph, allocs[3].Graph})
	for _, k := range []memmap.EventKind{memmap.EventCaptureBegin, memmap.EventCaptureEnd, memmap.EventGraphClose} {
		require.Equal(t, g.ID(), at[k][0].Graph, k)
		require.Zero(t, at[k][0].Pool, k)
	}
	require.Equal(t, "global", at[memmap.EventCaptureBegin][0].Detail)
	require.Equal(t, g.ID(), at[memmap.EventFree][2].Graph, "the graph-owned free")
	last := h.Events[len(h.Events)-1]
	st := a.Stats()
	require.Zero(t, last.InUse, "everything freed")
	require.Equal(t, st.BytesReserved, last.Reserved, "the segment events sum to what the pool holds")
	var mapped int64
	for _, e := range at[memmap.EventSegmentMap] {
		mapped += e.Size
	}
	require.Positive(t, mapped)
	require.Len(t, at[memmap.EventOutOfMemory], 1)
	require.Contains(t, at[memmap.EventOutOfMemory][0].Detail, "larger than the whole device")

	frames := func(e memmap.Event) []string {
		require.GreaterOrEqual(t, e.Stack, 0)
		var out []string
		for _, f := range h.Stacks[e.Stack] {
			out = append(out, strings.TrimPrefix(f.Function, testPkg))
		}
		return out
	}
	require.Equal(t, []string{"inlinedAlloc", "inlinedTwice", "TestHistoryRecordsEvents"}, frames(allocs[0])[:3])
	require.Equal(t, "TestHistoryRecordsEvents", frames(at[memmap.EventOutOfMemory][0])[0])
	require.Equal(t, "TestHistoryRecordsEvents.func1", frames(allocs[3])[0], "the capture's function")
	for _, stk := range h.Stacks {
		require.False(t, strings.HasPrefix(stk[0].Function, "github.com/capalloc/capalloc/alloc."), "the allocator's own frames are left out: %v", stk)
	}
}

// An out-of-memory event says which call failed when it was not Alloc.
func TestHistoryOutOfMemorySaysWhichCall(t *testing.T) {
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 100})
	_, err := a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	_, err = a.AllocSync(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	held, err := a.AllocSync(48 << 20)
	require.NoError(t, err)
	_, err = a.AllocSync(48 << 20) // fits the device, not the driver's memory left
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, a.Free(held))
	_, err = a.Workspace("big", 1<<40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	var vias []memmap.AllocVia
	for _, e := range readHistory(t, a).Events {
		if e.Kind == memmap.EventOutOfMemory {
			vias = append(vias, e.Via)
			require.Empty(t, e.Workspace)
		}
	}
	require.Equal(t, []memmap.AllocVia{"", memmap.ViaAllocSync, memmap.ViaAllocSync, memmap.ViaWorkspace}, vias)
}

// A capture into a graph pool names the pool at its begin, its
// allocations (the pool's memory) are graph-owned by its graph, a
// workspace first allocated in a capture is graph-owned and named, and
// the pool's close is an event naming it.
func TestHistoryRecordsGraphPools(t *testing.T) {
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 1000})
	warm, err := a.Alloc(512 << 10) // cached memory for the pool to borrow
	require.NoError(t, err)
	require.NoError(t, a.Free(warm))
	gp := a.NewGraphPool()
	var out, ws alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp, Mode: alloc.Relaxed}, func() error {
		if out, err = a.Alloc(256 << 10); err != nil {
			return err
		}
		ws, err = a.Workspace("lazy", 64<<10)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, gp.Close())
	require.NoError(t, g.Close())

	h := readHistory(t, a)
	var begin, poolClose *memmap.Event
	byAddr := map[driver.DevicePtr][]memmap.Event{}
	for i, e := range h.Events {
		switch e.Kind {
		case memmap.EventCaptureBegin:
			begin = &h.Events[i]
		case memmap.EventPoolClose:
			poolClose = &h.Events[i]
		case memmap.EventAlloc, memmap.EventFree:
			if begin != nil { // the warm-up's buffer had the address first
				byAddr[e.Addr] = append(byAddr[e.Addr], e)
			}
		}
	}
	require.NotNil(t, begin)
	require.Positive(t, begin.Pool)
	require.Equal(t, g.ID(), begin.Graph)
	require.Equal(t, "relaxed", begin.Detail)
	require.NotNil(t, poolClose)
	require.Equal(t, begin.Pool, poolClose.Pool)
	for _, b := range []alloc.Buffer{out, ws} {
		evs := byAddr[b.Ptr()]
		require.Len(t, evs, 2, "its alloc and, at Graph.Close, its free")
		for _, e := range evs {
			require.Equal(t, memmap.BlockGraphOwned, e.State)
			require.Equal(t, g.ID(), e.Graph)
		}
	}
	require.Equal(t, memmap.ViaWorkspace, byAddr[ws.Ptr()][0].Via)
	require.Equal(t, "lazy", byAddr[ws.Ptr()][0].Workspace)
	var again bytes.Buffer
	require.NoError(t, a.WriteHistory(&again))
	_, err = memmap.ReadHistories(&again, memmap.DefaultHistoryLimits)
	require.NoError(t, err, "the reader accepts what the writer wrote")
}

// The ring keeps the latest Options.History events, numbered on from
// the first; off (the default) it keeps none.
func TestHistoryBounded(t *testing.T) {
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 5})
	for range 10 {
		b, err := a.Alloc(4 << 10)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	h := readHistory(t, a)
	require.Len(t, h.Events, 5)
	require.Greater(t, h.Recorded, uint64(20))
	for i, e := range h.Events {
		require.Equal(t, h.Recorded-5+uint64(i), e.Seq)
	}
	require.Equal(t, memmap.EventFree, h.Events[4].Kind)
	require.Zero(t, h.Events[4].InUse)

	off := cpuAllocatorWith(t, 64<<20, alloc.Options{})
	b, err := off.Alloc(4 << 10)
	require.NoError(t, err)
	require.NoError(t, off.Free(b))
	h = readHistory(t, off)
	require.Zero(t, h.Capacity)
	require.Empty(t, h.Events)
	require.Zero(t, h.Recorded)
}

// With HistoryFile set, an out-of-memory error leaves the history in the
// file once FlushHistoryFiles returns, the failed request last, from the
// driver's refusal as from a request larger than the device. The history
// stays readable after Close, which gives every segment back.
func TestHistoryFileAtOutOfMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom-history.json")
	a := cpuAllocatorWith(t, 8<<20, alloc.Options{History: 100, HistoryFile: path})
	var held []alloc.Buffer
	var err error
	for err == nil { // until the driver runs out
		var b alloc.Buffer
		if b, err = a.Alloc(1 << 20); err == nil {
			held = append(held, b)
		}
	}
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, alloc.FlushHistoryFiles())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var h memmap.History
	require.NoError(t, json.Unmarshal(raw, &h))
	lastOOM := func(h memmap.History) memmap.Event {
		e := h.Events[len(h.Events)-1]
		require.Equal(t, memmap.EventOutOfMemory, e.Kind)
		require.Equal(t, testPkg+"TestHistoryFileAtOutOfMemory", h.Stacks[e.Stack][0].Function)
		return e
	}
	e := lastOOM(h)
	require.Contains(t, e.Detail, "driver out of memory")
	require.EqualValues(t, 1<<20, e.Size, "the event carries the request")
	require.EqualValues(t, len(held)<<20, e.InUse)
	for _, b := range held {
		require.NoError(t, a.Free(b))
	}

	_, err = a.Workspace("huge", 1<<40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, alloc.FlushHistoryFiles())
	raw, err = os.ReadFile(path)
	require.NoError(t, err)
	h = memmap.History{}
	require.NoError(t, json.Unmarshal(raw, &h))
	require.Contains(t, lastOOM(h).Detail, "larger than the whole device")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")

	require.NoError(t, a.Close())
	after := readHistory(t, a)
	require.Greater(t, after.Recorded, h.Recorded, "still recording after the dump, and readable after Close")
	require.Equal(t, memmap.EventSegmentUnmap, after.Events[len(after.Events)-1].Kind, "Close gave the segments back")
	require.Zero(t, after.Events[len(after.Events)-1].Reserved)
}

// Under concurrent allocations and frees (the lane's, without the
// allocator's lock, and the locked path's), each address's events
// alternate alloc, free, as the buffers' lives did: the ring's order is
// the state's. Run with -race.
func TestHistoryOrderUnderConcurrency(t *testing.T) {
	a := cpuAllocatorWith(t, 256<<20, alloc.Options{History: 1 << 16})
	wait := allocFreeWorkers(t, a, 4, 2000, func(w, i int) int64 { return int64(4<<10) << (i % 3 * w % 4) })
	for range 5 {
		var buf bytes.Buffer
		require.NoError(t, a.WriteHistory(&buf)) // while they run
	}
	wait()
	h := readHistory(t, a)
	require.EqualValues(t, len(h.Events), h.Recorded, "nothing dropped")
	live := map[driver.DevicePtr]bool{}
	var inUse int64
	for _, e := range h.Events {
		switch e.Kind {
		case memmap.EventAlloc:
			require.False(t, live[e.Addr], "seq %d: %#x allocated while live", e.Seq, e.Addr)
			live[e.Addr] = true
			inUse += e.Size
		case memmap.EventFree:
			require.True(t, live[e.Addr], "seq %d: %#x freed while not live", e.Seq, e.Addr)
			live[e.Addr] = false
			inUse -= e.Size
		}
		require.Equal(t, inUse, e.InUse, "seq %d", e.Seq)
	}
	require.Zero(t, inUse)
}

// The views' window (registry.History) is the newest maxEvents events of
// the ring, oldest first, before and after the ring wraps: WriteHistory's
// events, numbered the same, with Truncated counting the kept events left
// out; a window larger than what is kept is all of it.
func TestHistoryWindowIsTheNewestEvents(t *testing.T) {
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 7})
	for _, pairs := range []int{1, 2, 20} { // 3 events (the segment's map, then a pair); 7, the ring just full; wrapped
		for range pairs {
			b, err := a.Alloc(4 << 10)
			require.NoError(t, err)
			require.NoError(t, a.Free(b))
		}
		whole := readHistory(t, a)
		kept := len(whole.Events)
		for _, n := range []int{0, 1, 2, kept - 1, kept, kept + 1, 100, -1} {
			w := registry.History(a, n)
			want := kept
			if n >= 0 {
				want = min(n, kept)
			}
			require.Equal(t, whole.Recorded, w.Recorded)
			require.Len(t, w.Events, want, "window %d of %d", n, kept)
			require.Equal(t, kept-want, w.Truncated)
			for i, e := range w.Events {
				require.Equal(t, whole.Events[kept-want+i].Seq, e.Seq)
				require.Equal(t, whole.Events[kept-want+i].Kind, e.Kind)
				require.Equal(t, whole.Events[kept-want+i].Addr, e.Addr)
			}
		}
	}
}
