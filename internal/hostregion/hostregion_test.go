package hostregion

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type region struct{ buf []byte }

func TestFind(t *testing.T) {
	a, b := make([]byte, 64), make([]byte, 128)
	rs := []region{{a}, {b}}
	if Addr(a) > Addr(b) {
		rs[0], rs[1] = rs[1], rs[0]
	}
	start := func(r region) uintptr { return Addr(r.buf) }
	size := func(r region) uintptr { return uintptr(len(r.buf)) }
	find := func(x []byte) (int, uintptr) { return Find(rs, start, size, x) }

	i, off := find(b[10:20])
	require.Equal(t, Addr(b), Addr(rs[i].buf))
	require.Equal(t, uintptr(10), off)
	i, off = find(a)
	require.Equal(t, Addr(a), Addr(rs[i].buf))
	require.Zero(t, off)
	i, _ = find(b[120:128])
	require.GreaterOrEqual(t, i, 0, "a slice ending exactly at the region's end is inside")

	i, _ = find(b[:0])
	require.Equal(t, -1, i, "an empty slice is in no region")
	i, _ = find(make([]byte, 8))
	require.Equal(t, -1, i, "pageable memory is in no region")
	big := make([]byte, 256)
	i, _ = Find([]region{{big[:64]}}, start, size, big[60:70])
	require.Equal(t, -1, i, "a slice crossing the region's end is not inside")
	i, _ = Find(rs[:0], start, size, a)
	require.Equal(t, -1, i, "no regions")
}
