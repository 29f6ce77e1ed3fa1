package alloctest

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// New is an allocator over d with opts for a test or benchmark, closed
// when it ends (before anything the caller registered for cleanup
// earlier, d's Close included); a failed Close fails it (ErrClosed
// aside: the test may close it itself, to check that Close), and a
// failed New ends it at once.
func New(tb testing.TB, d driver.Driver, opts alloc.Options) *alloc.Allocator {
	tb.Helper()
	a, err := alloc.New(d, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := a.Close(); err != nil && !errors.Is(err, alloc.ErrClosed) {
			tb.Error(err)
		}
	})
	return a
}
