package alloc_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
)

// Open allocators have distinct names: a default one is the backend's name
// and a number, a name in use is refused before any driver call (no stream
// made), and a closed allocator's name is free again.
func TestAllocatorNames(t *testing.T) {
	d := newCPU(t, 0)
	spy := alloctest.NewSpy(d)

	x, err := alloc.New(spy, alloc.Options{Name: "decoder"})
	require.NoError(t, err)
	require.Equal(t, "decoder", registry.Name(x))
	require.Same(t, x, registry.Lookup("decoder"))

	before := spy.Snapshot()
	_, err = alloc.New(spy, alloc.Options{Name: "decoder"})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.ErrorContains(t, err, `"decoder" is in use`)
	calls := spy.Snapshot().Sub(before)
	require.Zero(t, calls.Total(alloctest.MethodName, alloctest.MethodInfo, alloctest.MethodCaptureDomain), "refused before any call but the queries: %v", calls)
	require.Same(t, x, registry.Lookup("decoder"), "the refusal changed nothing")

	y, err := alloc.New(spy, alloc.Options{})
	require.NoError(t, err)
	require.Regexp(t, `^cpu-\d+$`, registry.Name(y))
	z, err := alloc.New(spy, alloc.Options{})
	require.NoError(t, err)
	require.NotEqual(t, registry.Name(y), registry.Name(z))

	names := func() []string {
		var out []string
		for _, a := range registry.Allocators() {
			out = append(out, registry.Name(a))
		}
		return out
	}
	require.Subset(t, names(), []string{"decoder", registry.Name(y), registry.Name(z)})
	require.True(t, slices.IsSorted(names()))

	require.NoError(t, x.Close())
	require.Nil(t, registry.Lookup("decoder"))
	require.NotContains(t, names(), "decoder")
	again, err := alloc.New(spy, alloc.Options{Name: "decoder"})
	require.NoError(t, err, "a closed allocator's name is free")
	for _, a := range []*alloc.Allocator{again, y, z} {
		require.NoError(t, a.Close())
	}
}

// Readers walking Allocators() while other goroutines make and close
// allocators never see one half built or misbehaving once closed: New
// publishes an allocator only when it is complete, and every reader
// method is safe on one closed meanwhile (issue 27, item 1).
func TestAllocatorsNeverListsAHalfBuiltOne(t *testing.T) {
	d := newCPU(t, 0)
	const rounds = 2000
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			for i := range rounds {
				a, err := alloc.New(d, alloc.Options{Name: fmt.Sprint("half-built-", i%4)})
				if err != nil {
					return err
				}
				if err := a.Close(); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			return
		default:
		}
		for _, a := range registry.Allocators() {
			st := a.Stats()
			require.GreaterOrEqual(t, st.BytesReserved, int64(0))
			if _, err := registry.Usage(a); err != nil {
				require.ErrorIs(t, err, alloc.ErrClosed)
			}
			if _, err := a.Snapshot(); err != nil {
				require.ErrorIs(t, err, alloc.ErrClosed)
			}
			require.NotNil(t, a.Stream(), "listed before its stream was made")
		}
	}
}

// A name that is not UTF-8 is refused with ErrInvalidValue before any
// driver call; the views and metrics label by name and need text
// (issue 27, item 5).
func TestAllocatorNameMustBeUTF8(t *testing.T) {
	d := newCPU(t, 0)
	spy := alloctest.NewSpy(d)
	before := spy.Snapshot()
	_, err := alloc.New(spy, alloc.Options{Name: "gpu\xff0"})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.ErrorContains(t, err, "not valid UTF-8")
	calls := spy.Snapshot().Sub(before)
	require.Zero(t, calls.Total(alloctest.MethodName, alloctest.MethodInfo, alloctest.MethodCaptureDomain), "refused before any call but the queries: %v", calls)
	require.Nil(t, registry.Lookup("gpu\xff0"))
	for _, a := range registry.Allocators() {
		require.NotEqual(t, "gpu\xff0", registry.Name(a))
	}

	// A default name is made of the backend's, which is the driver's own.
	a, err := alloc.New(oddBackend{d}, alloc.Options{})
	require.NoError(t, err)
	require.Regexp(t, "^cpu\uFFFD-\\d+$", registry.Name(a))
	require.NoError(t, a.Close())
}

// oddBackend is a driver whose backend name is not UTF-8.
type oddBackend struct{ driver.Driver }

func (oddBackend) Name() string { return "cpu\xfe" }

// driver.DeviceWide and driver.AfterGlobalCaptures reach the capture
// domains of package alloc (its init sets the hooks): a Global-mode
// capture refuses the one, with no call made, and defers the other until
// it ends.
func TestDriverDomainHooksReachTheAllocator(t *testing.T) {
	d, a := newCPUAllocator(t, 0)
	defer a.Close()

	require.NoError(t, a.BeginCapture(alloc.Global))
	called := false
	err := driver.DeviceWide(d.CaptureDomain(), "hook test", func() error { called = true; return nil })
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.False(t, called, "no call during a Global-mode capture")
	ran := make(chan struct{})
	require.False(t, driver.AfterGlobalCaptures(d.CaptureDomain(), func() { close(ran) }), "deferred while the capture is active")
	g, err := a.EndCapture()
	require.NoError(t, err)
	<-ran // run when the capture ended
	require.NoError(t, g.Close())
	require.NoError(t, driver.DeviceWide(d.CaptureDomain(), "hook test", func() error { called = true; return nil }))
	require.True(t, called)
}
