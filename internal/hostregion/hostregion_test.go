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

func (r region) Start() uintptr { return Addr(r.buf) }
func (r region) Len() int       { return len(r.buf) }

// A Set holds what was inserted, in any order, until it is removed exactly
// as inserted or taken; a part of a buffer, or a buffer removed already,
// is refused and leaves the set as it was.
func TestSet(t *testing.T) {
	var s Set[region]
	bufs := [][]byte{make([]byte, 64), make([]byte, 128), make([]byte, 32)}
	require.False(t, s.Holds(bufs[0]), "the zero Set is empty")
	for _, b := range bufs {
		s.Insert(region{b})
	}
	require.Equal(t, 3, s.Len())
	for _, b := range bufs {
		require.True(t, s.Holds(b[1:]))
	}
	require.False(t, s.Holds(make([]byte, 8)))
	r, off, ok := s.Find(bufs[1][10:20])
	require.True(t, ok)
	require.Equal(t, Addr(bufs[1]), r.Start())
	require.Equal(t, uintptr(10), off)
	_, _, ok = s.Find(make([]byte, 8))
	require.False(t, ok, "pageable memory is in no buffer")

	_, ok = s.Remove(bufs[1][:64])
	require.False(t, ok, "a part of a buffer is not removed")
	_, ok = s.Remove(nil)
	require.False(t, ok)
	r, ok = s.Remove(bufs[1])
	require.True(t, ok)
	require.Equal(t, Addr(bufs[1]), r.Start())
	require.False(t, s.Holds(bufs[1]))
	_, ok = s.Remove(bufs[1])
	require.False(t, ok, "removed already")
	require.True(t, s.Holds(bufs[0]) && s.Holds(bufs[2]))
	_, ok = s.RemoveWhere(func(r region) bool { return r.Len() == 1000 })
	require.False(t, ok, "nothing matches")
	require.Equal(t, 2, s.Len())

	taken := s.Take()
	require.Len(t, taken, 2)
	require.Less(t, taken[0].Start(), taken[1].Start(), "sorted by address")
	require.Zero(t, s.Len())
	require.False(t, s.Holds(bufs[0]))
}
