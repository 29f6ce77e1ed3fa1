package alloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// Both allocation paths give the pool's cache back to the driver and retry
// once when the device is out of memory: memory the allocator merely
// caches must never make an allocation fail.
func TestOutOfMemoryGivesCacheBack(t *testing.T) {
	const limit = 1 << 20
	for _, path := range []string{"Alloc", "AllocSync"} {
		t.Run(path, func(t *testing.T) {
			d, err := cpu.New(cpu.Options{MemoryLimit: limit})
			require.NoError(t, err)
			defer d.Close()
			a, err := alloc.New(d, alloc.Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Close()) }()

			// Fill the device with cached blocks of another size class.
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
