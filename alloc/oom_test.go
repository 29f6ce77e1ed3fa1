package alloc_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// Both allocation paths give the pool's cache back to the driver and retry
// once when the device is out of memory: memory the allocator merely
// caches must never make an allocation fail.
func TestOutOfMemoryGivesCacheBack(t *testing.T) {
	const limit = 1 << 20
	for _, path := range []string{"Alloc", "AllocSync"} {
		t.Run(path, func(t *testing.T) {
			a := fullOfCache(t, limit)
			var err error

			var b alloc.Buffer
			if path == "Alloc" {
				b, err = a.Alloc(limit / 2)
			} else {
				b, err = a.AllocSync(limit / 2)
			}
			require.NoError(t, err, "the cache was not given back before failing")
			require.NoError(t, a.Free(b))
		})
	}
}

// An error of earlier stream work that surfaces while an out-of-memory
// AllocSync gives the cache back (at its synchronize) is reported with the
// out-of-memory, both matchable, not swallowed: it is the engine's bug.
func TestAllocSyncGiveBackReportsAsyncError(t *testing.T) {
	const limit = 1 << 20
	a := fullOfCache(t, limit)
	boom := errors.New("kernel failed")
	require.NoError(t, a.LaunchHostFunc(func() error { return boom }))
	_, err := a.AllocSync(limit / 2)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.ErrorIs(t, err, boom, "the stream's error is not hidden behind the out-of-memory")
	require.NoError(t, a.Synchronize(), "reported once")
	b, err := a.AllocSync(limit / 2) // the cache was given back meanwhile
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
}

// fullOfCache returns an allocator on a cpu device of limit bytes whose
// memory is all held by the pool's cache: blocks of limit/8 allocated until
// the device ran out, then freed. Both are closed when the test ends.
func fullOfCache(t *testing.T, limit int64) *alloc.Allocator {
	t.Helper()
	_, a := newCPUAllocator(t, limit)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	var bs []alloc.Buffer
	for {
		b, err := a.Alloc(limit / 8)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrOutOfMemory)
			break
		}
		bs = append(bs, b)
	}
	require.NotEmpty(t, bs)
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
	require.Positive(t, a.Stats().BytesCached)
	return a
}
