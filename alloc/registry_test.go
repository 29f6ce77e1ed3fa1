package alloc_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
)

// Open allocators have distinct names: a default one is the backend's name
// and a number, a name in use is refused before any driver call (no stream
// made), and a closed allocator's name is free again.
func TestAllocatorNames(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	defer d.Close()
	spy := alloctest.NewSpy(d)

	x, err := alloc.New(spy, alloc.Options{Name: "decoder"})
	require.NoError(t, err)
	require.Equal(t, "decoder", x.Name())
	require.Same(t, x, alloc.Lookup("decoder"))

	before := spy.Snapshot()
	_, err = alloc.New(spy, alloc.Options{Name: "decoder"})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.ErrorContains(t, err, `"decoder" is in use`)
	calls := spy.Snapshot().Sub(before)
	require.Zero(t, calls.Total(alloctest.MethodName, alloctest.MethodInfo, alloctest.MethodCaptureDomain), "refused before any call but the queries: %v", calls)
	require.Same(t, x, alloc.Lookup("decoder"), "the refusal changed nothing")

	y, err := alloc.New(spy, alloc.Options{})
	require.NoError(t, err)
	require.Regexp(t, `^cpu-\d+$`, y.Name())
	z, err := alloc.New(spy, alloc.Options{})
	require.NoError(t, err)
	require.NotEqual(t, y.Name(), z.Name())

	names := func() []string {
		var out []string
		for _, a := range alloc.Allocators() {
			out = append(out, a.Name())
		}
		return out
	}
	require.Subset(t, names(), []string{"decoder", y.Name(), z.Name()})
	require.True(t, slices.IsSorted(names()))

	require.NoError(t, x.Close())
	require.Nil(t, alloc.Lookup("decoder"))
	require.NotContains(t, names(), "decoder")
	again, err := alloc.New(spy, alloc.Options{Name: "decoder"})
	require.NoError(t, err, "a closed allocator's name is free")
	for _, a := range []*alloc.Allocator{again, y, z} {
		require.NoError(t, a.Close())
	}
}
