package alloc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// blockAt finds the block at ptr in a snapshot, with its segment.
func blockAt(t *testing.T, s memmap.Snapshot, ptr driver.DevicePtr) (memmap.Segment, memmap.Block) {
	t.Helper()
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if seg.Ptr+driver.DevicePtr(b.Offset) == ptr {
				return seg, b
			}
		}
	}
	t.Fatalf("no block at %#x", ptr)
	return memmap.Segment{}, memmap.Block{}
}

// Every state a block can be in, each where it should be; the states'
// bytes add up to what the allocator holds from the driver; the graphs
// say what they own and hold; the whole encodes as JSON and back.
func TestSnapshotStates(t *testing.T) {
	a := newNamed(t, "snapshot-states")
	live, err := a.Alloc(100 << 10)
	require.NoError(t, err)
	hole, err := a.Alloc(200 << 10) // freed below: a hole in a used segment
	require.NoError(t, err)
	keep, err := a.Alloc(100 << 10) // keeps the hole's segment in use
	require.NoError(t, err)
	ws, err := a.Workspace("attn", 64<<10)
	require.NoError(t, err)
	big, err := a.Alloc(30 << 20) // a large segment of its own, then cached
	require.NoError(t, err)
	sync, err := a.AllocSync(1 << 20)
	require.NoError(t, err)
	kv, err := a.Alloc(128 << 10) // freed in the capture: held for the graph
	require.NoError(t, err)
	h, err := a.HostAlloc(4 << 10)
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, a.Free(hole))
	require.NoError(t, a.Free(big))

	var owned alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(kv, 0, h, 0, 4<<10); err != nil {
			return err
		}
		if err := a.UploadHost(live, 0, h, 0, 4<<10); err != nil { // used, stays live
			return err
		}
		if err := a.Free(kv); err != nil {
			return err
		}
		var err error
		owned, err = a.Alloc(512 << 10)
		return err
	})
	require.NoError(t, err)

	s, err := a.Snapshot()
	require.NoError(t, err)
	require.Equal(t, "snapshot-states", s.Allocator)
	require.Equal(t, "cpu", s.Backend)
	require.False(t, s.Capturing)

	_, b := blockAt(t, s, live.Ptr())
	require.Equal(t, memmap.BlockLive, b.State)
	require.EqualValues(t, 100<<10, b.Requested)
	require.Len(t, b.Graphs, 1, "the graph's work uses it")
	_, b = blockAt(t, s, hole.Ptr())
	require.Equal(t, memmap.BlockCachedFragment, b.State)
	_, b = blockAt(t, s, ws.Ptr())
	require.Equal(t, memmap.BlockWorkspace, b.State)
	require.Equal(t, "attn", b.Workspace)
	seg, b := blockAt(t, s, big.Ptr())
	require.Equal(t, memmap.BlockCachedSegment, b.State)
	require.Equal(t, "large", seg.Kind)
	require.Len(t, seg.Blocks, 1)
	seg, b = blockAt(t, s, sync.Ptr())
	require.Equal(t, "sync", seg.Kind)
	require.Equal(t, memmap.BlockLive, b.State)
	_, b = blockAt(t, s, kv.Ptr())
	require.Equal(t, memmap.BlockHeldForGraph, b.State)
	require.Len(t, b.Graphs, 1, "held for the one graph, listed once")
	seg, b = blockAt(t, s, owned.Ptr())
	require.Equal(t, "graph", seg.Kind)
	require.Equal(t, memmap.BlockGraphOwned, b.State)

	require.Len(t, s.Graphs, 1)
	gi := s.Graphs[0]
	require.Equal(t, seg.Graph, gi.ID)
	require.NotZero(t, gi.ID)
	require.Equal(t, memmap.GraphInfo{ID: gi.ID, OwnedBytes: 512 << 10, OwnedBlocks: 1,
		HeldBytes: 128 << 10, HeldBlocks: 1, UsedBytes: 100 << 10, UsedBlocks: 1}, gi)

	var sum int64
	for _, n := range s.Bytes {
		sum += n
	}
	require.Equal(t, s.Stats.BytesReserved, sum, "every reserved byte is in exactly one state: %v", s.Bytes)
	require.EqualValues(t, 512<<10, s.Bytes[memmap.BlockGraphOwned])
	require.EqualValues(t, 128<<10, s.Bytes[memmap.BlockHeldForGraph])
	u, err := registry.Usage(a)
	require.NoError(t, err)
	require.Equal(t, s.Bytes, u.Bytes)
	require.Equal(t, s.GraphInUse, u.GraphInUse)

	js, err := json.Marshal(s)
	require.NoError(t, err)
	var back memmap.Snapshot
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, s.Segments, back.Segments)
	require.Equal(t, s.Stats, back.Stats)

	// A second snapshot numbers the graph the same; closing it releases
	// what it owned and held.
	s2, err := a.Snapshot()
	require.NoError(t, err)
	require.Equal(t, gi.ID, s2.Graphs[0].ID)
	require.NoError(t, g.Close())
	s3, err := a.Snapshot()
	require.NoError(t, err)
	require.Empty(t, s3.Graphs)
	require.Zero(t, s3.Bytes[memmap.BlockGraphOwned])
	require.Zero(t, s3.Bytes[memmap.BlockHeldForGraph])
	for _, buf := range []alloc.Buffer{live, keep, sync} {
		require.NoError(t, a.Free(buf))
	}
}

// The recording capture is listed, with the number its graph will have,
// and what it took shows while it runs.
func TestSnapshotDuringCapture(t *testing.T) {
	a := newNamed(t, "snapshot-capture")
	require.NoError(t, a.BeginCapture(alloc.Global))
	b, err := a.Alloc(64 << 10)
	require.NoError(t, err)
	s, err := a.Snapshot()
	require.NoError(t, err)
	require.True(t, s.Capturing)
	require.Len(t, s.Graphs, 1)
	id := s.Graphs[0].ID
	require.Equal(t, []memmap.GraphInfo{{ID: id, Capturing: true, OwnedBytes: 64 << 10, OwnedBlocks: 1}}, s.Graphs)
	seg, blk := blockAt(t, s, b.Ptr())
	require.Equal(t, id, seg.Graph)
	require.Equal(t, id, blk.Graph)
	require.Equal(t, memmap.BlockGraphOwned, blk.State)
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.Equal(t, id, g.ID(), "the graph keeps its capture's number")
	require.NoError(t, g.Close())

	_, c := newCPUAllocator(t, 0)
	require.NoError(t, c.Close())
	_, err = c.Snapshot()
	require.ErrorIs(t, err, alloc.ErrClosed)
	_, err = registry.Usage(c)
	require.ErrorIs(t, err, alloc.ErrClosed)
}

// Snapshots and profiles taken while other goroutines allocate, free and
// capture on the same allocators see consistent states (run with -race):
// every snapshot's states add up to its reserved bytes.
func TestViewsWhileAllocating(t *testing.T) {
	recordEvery(t, 4<<10)
	as := []*alloc.Allocator{newNamed(t, "busy-0"), newNamed(t, "busy-1")}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := a.Alloc(int64(1+n%7) << (10 + i))
				if err != nil {
					t.Error(err)
					return
				}
				if n%5 == 0 {
					g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
						_, err := a.Alloc(8 << 10)
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					_ = g.Close()
				}
				if err := a.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 50 {
		for _, a := range as {
			s, err := a.Snapshot()
			require.NoError(t, err)
			var sum int64
			for _, n := range s.Bytes {
				sum += n
			}
			require.Equal(t, s.Stats.BytesReserved, sum)
		}
		require.NoError(t, alloc.WriteProfile(io.Discard))
	}
	close(stop)
	wg.Wait()
}

// A Snapshot's counters are of the moment of its blocks, while goroutines
// allocate and free on the lane. More Ps than cores: a worker the OS
// preempts between two calls, rather than one parked on the allocator's
// lock, is what meets a Snapshot between its walk and its counters (a
// counter read apart from the walk disagreed a few times in 50,000).
func TestSnapshotCountersMatchItsBlocks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	_, a := newCPUAllocator(t, 1<<30)
	const n, workers, snaps = 64 << 10, 2, 50000
	stop := churn(workers, func() error {
		b, err := a.Alloc(n)
		if err != nil {
			return err
		}
		return a.Free(b)
	})
	var bad []string
	for range snaps {
		s, err := a.Snapshot()
		require.NoError(t, err)
		live, requested := 0, int64(0)
		for _, seg := range s.Segments {
			for _, b := range seg.Blocks {
				if b.State == memmap.BlockLive {
					live++
					requested += b.Requested
				}
			}
		}
		if live != s.Stats.LiveBuffers || requested != s.Stats.BytesInUse ||
			s.Bytes[memmap.BlockCachedFragment]+s.Bytes[memmap.BlockCachedSegment] != s.Stats.BytesCached {
			bad = append(bad, fmt.Sprintf("%d live blocks of %d B listed, %d free and cached; stats: %s",
				live, requested, s.Bytes[memmap.BlockCachedFragment]+s.Bytes[memmap.BlockCachedSegment], alloc.Stats(s.Stats)))
		}
	}
	require.NoError(t, stop())
	require.Empty(t, bad, "%d of %d snapshots disagree with their blocks", len(bad), snaps)
	require.NoError(t, a.Close())
}

// kvPageForSites is an engine's small allocation wrapper: inlined, as
// such wrappers are.
func kvPageForSites(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(64 << 10) }

// A sampled block names where the engine allocated it (the leaf the
// profile shows, an inlined wrapper included); a block allocated while
// recording was off names nothing.
func TestSnapshotNamesCallSites(t *testing.T) {
	a := newNamed(t, "snapshot-sites")
	unsampled, err := a.Alloc(32 << 10)
	require.NoError(t, err)
	recordEvery(t, 1)
	kv, err := kvPageForSites(a)
	require.NoError(t, err)
	ws, err := a.Workspace("attn", 8<<10)
	require.NoError(t, err)

	s, err := a.Snapshot()
	require.NoError(t, err)
	_, b := blockAt(t, s, kv.Ptr())
	require.Regexp(t, `^`+regexp.QuoteMeta(testPkg)+`kvPageForSites snapshot_test\.go:\d+$`, b.CallSite)
	_, b = blockAt(t, s, ws.Ptr())
	require.Regexp(t, `^`+regexp.QuoteMeta(testPkg)+`TestSnapshotNamesCallSites snapshot_test\.go:\d+$`, b.CallSite)
	_, b = blockAt(t, s, unsampled.Ptr())
	require.Empty(t, b.CallSite)

	js, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(js), `"call_site":"`+testPkg+`kvPageForSites snapshot_test.go:`)
	require.NoError(t, a.Free(kv))
	require.NoError(t, a.Free(unsampled))
}
