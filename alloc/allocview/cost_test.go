package allocview_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// Requests within the snapshot's lifetime share one walk of the
// allocator, whatever the view: a buffer allocated meanwhile shows only
// once the snapshot expires.
func TestViewsShareACachedSnapshot(t *testing.T) {
	defer allocview.SetSnapshotTTL(time.Hour)()
	a := engine(t, "view-cached")
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	snap := func() memmap.Snapshot {
		_, body := get(t, srv.URL+"/snapshot.json?allocator="+registry.Name(a))
		var s memmap.Snapshot
		require.NoError(t, json.Unmarshal(body, &s))
		return s
	}
	first := snap()
	var wg sync.WaitGroup
	for range 8 { // concurrent clients: one walk serves them all
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(t, srv.URL+"/segments.svg")
			get(t, srv.URL+"/")
		}()
	}
	wg.Wait()
	b, err := a.Alloc(4 << 20)
	require.NoError(t, err)
	defer a.Free(b)
	again := snap()
	require.Equal(t, first.Time, again.Time, "the same walk")
	require.Equal(t, first.Stats, again.Stats)

	defer allocview.SetSnapshotTTL(0)()
	fresh := snap()
	require.Equal(t, first.Stats.LiveBuffers+1, fresh.Stats.LiveBuffers, "an expired snapshot is walked again")
}

// snapshot.json lists at most max_blocks blocks (DefaultMaxBlocks by
// default), says how many it left out, and keeps the totals.
func TestSnapshotBlockLimit(t *testing.T) {
	defer allocview.SetSnapshotTTL(0)()
	a := engine(t, "view-limit")
	want, err := a.Snapshot()
	require.NoError(t, err)
	total := 0
	for _, s := range want.Segments {
		total += len(s.Blocks)
	}
	require.Greater(t, total, 3)
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	for _, max := range []int{0, 1, 3, total} {
		resp, body := get(t, srv.URL+"/snapshot.json?allocator="+registry.Name(a)+"&max_blocks="+itoa(max))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var s memmap.Snapshot
		require.NoError(t, json.Unmarshal(body, &s))
		n := 0
		for _, seg := range s.Segments {
			n += len(seg.Blocks)
		}
		require.Equal(t, max, n, "max_blocks=%d", max)
		require.Equal(t, itoa(max)+" of "+itoa(total), resp.Header.Get("X-Capalloc-Blocks"))
		require.Equal(t, want.Bytes, s.Bytes, "totals cover every block")
	}
	resp, _ := get(t, srv.URL+"/snapshot.json?max_blocks=-1")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = get(t, srv.URL+"/snapshot.json")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func itoa(n int) string { return strconv.Itoa(n) }
