package nccl_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// A symmetric window over the stand-in: ncclMemAlloc'd memory registered
// with NCCL_WIN_COLL_SYMMETRIC on the device thread; an all-reduce on it
// goes through the allocator's stream at the window's offsets, and is
// captured; registration is refused during a Global capture with no NCCL
// call; Close deregisters and frees.
func TestWindow(t *testing.T) {
	f := loadFake(t)
	require.True(t, f.l.HasWindows())
	windows := func() (n int, flags int32, size uint64) {
		r := f.call(t, "fake_windows", uintptr(unsafe.Pointer(&flags)), uintptr(unsafe.Pointer(&size)))
		return int(r), flags, size
	}
	lastAllReduce := func() (send, recv uintptr, count uint64) {
		f.call(t, "fake_last_allreduce", uintptr(unsafe.Pointer(&send)), uintptr(unsafe.Pointer(&recv)), uintptr(unsafe.Pointer(&count)))
		return send, recv, count
	}
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	dev := &onCaller{}
	c, err := f.l.InitRank(dev, 1, id, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Destroy()) }()

	a := domainAllocator(t, "cuda", alloc.Options{})

	// Refused during a Global-mode capture, before any NCCL call.
	require.NoError(t, a.BeginCapture(alloc.Global))
	calls := dev.calls.Load()
	_, err = c.NewWindow(dev, 1<<16)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Equal(t, calls, dev.calls.Load())
	n, _, _ := windows()
	require.Zero(t, n)
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())

	w, err := c.NewWindow(dev, 1<<16)
	require.NoError(t, err)
	n, flags, size := windows()
	require.Equal(t, 1, n)
	require.EqualValues(t, 0x01, flags, "NCCL_WIN_COLL_SYMMETRIC")
	require.EqualValues(t, 1<<16, size)
	require.NotZero(t, w.Ptr())

	require.NoError(t, c.AllReduceWindow(a, w, 0, 1<<15, 1024, nccl.Float32, nccl.Sum))
	send, recv, count := lastAllReduce()
	require.Equal(t, uintptr(w.Ptr()), send)
	require.Equal(t, uintptr(w.Ptr())+1<<15, recv)
	require.EqualValues(t, 1024, count)
	g, err = a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return c.AllReduceWindow(a, w, 4096, 8192, 16, nccl.Int32, nccl.Sum)
	})
	require.NoError(t, err, "enqueued in the capture")
	require.NoError(t, g.Close())

	// Bad operands are typed errors before NCCL is called.
	require.ErrorIs(t, c.AllReduceWindow(a, w, 1<<16-8, 0, 4, nccl.Float32, nccl.Sum), alloc.ErrOutOfRange)
	require.ErrorIs(t, c.AllReduceWindow(a, w, -4, 0, 1, nccl.Float32, nccl.Sum), alloc.ErrOutOfRange)
	require.ErrorIs(t, c.AllReduceWindow(a, w, 0, 0, 1, nccl.DataType(42), nccl.Sum), alloc.ErrInvalidValue)
	require.ErrorIs(t, c.AllReduceWindow(a, nil, 0, 0, 1, nccl.Float32, nccl.Sum), alloc.ErrInvalidValue)
	_, err = c.NewWindow(dev, 0)
	require.ErrorIs(t, err, alloc.ErrInvalidSize)

	require.NoError(t, w.Close(dev))
	n, _, _ = windows()
	require.Zero(t, n)
	require.ErrorIs(t, w.Close(dev), alloc.ErrClosed)
	require.ErrorIs(t, c.AllReduceWindow(a, w, 0, 0, 1, nccl.Float32, nccl.Sum), alloc.ErrInvalidValue, "a closed window")
}

// An NCCL before 2.27 has no windows: refused with the reason.
func TestWindowNeedsNCCL227(t *testing.T) {
	f := loadFake(t, "-DFAKE_NO_WINDOWS")
	require.False(t, f.l.HasWindows())
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	c, err := f.l.InitRank(&onCaller{}, 1, id, 0)
	require.NoError(t, err)
	_, err = c.NewWindow(&onCaller{}, 4096)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "2.27")
}
