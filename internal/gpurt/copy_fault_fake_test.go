package gpurt_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The fakes' copies are as strict as a GPU's: a device-to-device copy
// or a memset past an allocation's end, from or into freed memory, or
// from an address no allocation holds fails with 700 (illegal address)
// and moves nothing; a captured copy whose source was freed after the
// capture fails at the graph's launch, as its memcpy node would fault.
// (The copy-engine collectives of symheap are such captured copies
// between heaps: this is what holds them to their peers' lifetime.)
func TestFakeCopyIllegalAddressFails(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		t.Cleanup(log.ResetFaults)
		const n = 256
		src, err := d.Malloc(n)
		require.NoError(t, err)
		dst, err := d.Malloc(n)
		require.NoError(t, err)
		freed, err := d.Malloc(n)
		require.NoError(t, err)
		require.NoError(t, d.Free(freed))
		fill(t, d, src, bytes.Repeat([]byte{7}, n))
		fill(t, d, dst, make([]byte, n))
		s := newStream(t, d)
		log.Lines()
		for name, bad := range map[string]func() error{
			"past the source's end":      func() error { return d.CopyDtoDAsync(dst, src+n/2, n, s) },
			"past the destination's end": func() error { return d.CopyDtoDAsync(dst+1, src, n, s) },
			"from freed memory":          func() error { return d.CopyDtoDAsync(dst, freed, n, s) },
			"into freed memory":          func() error { return d.CopyDtoDAsync(freed, src, n, s) },
			"from no allocation":         func() error { return d.CopyDtoDAsync(dst, driver.DevicePtr(0x1000), n, s) },
			"a memset past the end":      func() error { return d.MemsetAsync(dst+1, 0, n, s) },
		} {
			requireCode(t, v, bad(), 700)
			require.Len(t, find(log.Lines(), "illegal address:", "a device side is not memory the device may touch"), 1, name)
			require.Equal(t, make([]byte, n), read(t, d, dst, n), "%s: nothing moved", name)
		}

		// Captured while the source lives, replayed after it was freed.
		victim, err := d.Malloc(n)
		require.NoError(t, err)
		fill(t, d, victim, bytes.Repeat([]byte{9}, n))
		c := newStream(t, d)
		require.NoError(t, d.BeginCapture(c, driver.ThreadLocal))
		require.NoError(t, d.CopyDtoDAsync(dst, victim, n, c))
		g, err := d.EndCapture(c)
		require.NoError(t, err)
		exec, err := d.GraphInstantiate(g, false)
		require.NoError(t, err)
		require.NoError(t, d.GraphLaunch(exec, c))
		require.NoError(t, d.StreamSynchronize(c))
		require.Equal(t, bytes.Repeat([]byte{9}, n), read(t, d, dst, n), "the replay while the source lives")
		fill(t, d, dst, make([]byte, n))
		require.NoError(t, d.Free(victim))
		requireCode(t, v, d.GraphLaunch(exec, c), 700)
		require.Equal(t, make([]byte, n), read(t, d, dst, n), "the replay after the free moved nothing")
		require.NoError(t, d.GraphExecDestroy(exec))
		require.NoError(t, d.GraphDestroy(g))
	})
}
