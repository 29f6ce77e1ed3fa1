package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/stretchr/testify/require"
)

// When the driver runs out of memory while the pool caches freed blocks of
// other sizes, the allocator gives the cache back and retries, so cached
// memory never causes an out-of-memory an engine could not recover from.
func TestOutOfMemoryReleasesCacheAndRetries(t *testing.T) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 20})
	require.NoError(t, err)
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)

	var small []alloc.Buffer
	for i := 0; i < 12; i++ { // 12 × 64 KiB = 768 KiB of the 1 MiB device
		b, err := a.Alloc(64 << 10)
		require.NoError(t, err)
		small = append(small, b)
	}
	for _, b := range small {
		require.NoError(t, a.Free(b))
	}
	require.Equal(t, int64(12<<10)*64, a.Stats().BytesCached, "freed blocks stay cached")

	big, err := a.Alloc(512 << 10) // fits only once the cache is returned
	require.NoError(t, err)
	st := a.Stats()
	require.Zero(t, st.BytesCached, "the cache was given back to the driver")
	require.Equal(t, int64(512<<10), st.BytesInUse)

	_, err = a.Alloc(768 << 10) // does not fit even with an empty cache
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "in use 524288 B", "the error carries the stats")
	require.Equal(t, st.BytesInUse, a.Stats().BytesInUse, "a failed Alloc changes nothing")

	require.NoError(t, a.Free(big))
	require.NoError(t, a.Close())
}
