package alloc_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// New applies Options.ProfileRate, the process's sampling rate, once the
// allocator is open: a rate, off (negative), or, for zero, the rate left
// as it was; a New that fails changes nothing.
func TestNewAppliesProfileRate(t *testing.T) {
	prev, _ := alloc.SetProfileRate(0)
	t.Cleanup(func() { _, _ = alloc.SetProfileRate(prev) })
	rate := func() int {
		r, _ := alloc.SetProfileRate(0)
		_, _ = alloc.SetProfileRate(r)
		return r
	}
	d := newCPU(t, 0)
	for _, tc := range []struct{ opt, want int }{{0, 777}, {4096, 4096}, {-1, 0}} {
		_, _ = alloc.SetProfileRate(777)
		a, err := alloc.New(d, alloc.Options{ProfileRate: tc.opt})
		require.NoError(t, err)
		require.Equal(t, tc.want, rate(), "ProfileRate %d", tc.opt)
		require.NoError(t, a.Close())
	}
	_, _ = alloc.SetProfileRate(777)
	_, err := alloc.New(d, alloc.Options{ProfileRate: 1, Name: "\xff"})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Equal(t, 777, rate(), "a New that failed set no rate")
}

// Options.History set directly above its maximum (4,194,304 events, a
// ring of 1 GiB) is refused with ErrInvalidValue naming the maximum, as
// ParseOptions refuses it, before anything is allocated or reserved: a
// count past the slice limit used to panic in New ("makeslice: len out
// of range").
func TestNewRefusesAHistoryAboveItsMaximum(t *testing.T) {
	d := newCPU(t, 0)
	for _, n := range []int{1 << 50, math.MaxInt, 1<<22 + 1} {
		a, err := alloc.New(d, alloc.Options{Name: "too-long-a-history", History: n})
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "History %d", n)
		require.Nil(t, a)
		require.Contains(t, err.Error(), "more than the maximum, 4194304 events")
	}
	a, err := alloc.New(d, alloc.Options{Name: "too-long-a-history", History: 1 << 10})
	require.NoError(t, err, "the refused News left the name free")
	require.NoError(t, a.Close())
}
