package alloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// A view that covers its whole buffer has the buffer's address and size,
// and still is a view: it cannot be freed (neither the lane nor the
// locked path takes it), it leaves the buffer live, and it dies with it.
func TestWholeViewIsNotItsBuffer(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	b, err := a.Alloc(64 << 10)
	require.NoError(t, err)
	v, err := a.Slice(b, 0, b.Size())
	require.NoError(t, err)
	require.Equal(t, b.Ptr(), v.Ptr())
	require.Equal(t, b.Size(), v.Size())

	require.ErrorIs(t, a.Free(v), alloc.ErrInvalidBuffer, "a view is not freed")
	require.NoError(t, a.Memset(v, 0, 7, v.Size()), "the view still works")
	require.NoError(t, a.Free(b), "the buffer is still live")
	require.ErrorIs(t, a.Memset(v, 0, 7, 1), alloc.ErrInvalidBuffer, "a view dies with its buffer")
	require.ErrorIs(t, a.Free(v), alloc.ErrInvalidBuffer)
}
