package probe_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/probe"
)

// Stream hands each row over before probing the next: when the first row
// arrives, only its own allocator (one stream, two for a row that captures
// behind the allocator's back) has been made, of the one per row the whole
// matrix makes.
func TestStreamHandsRowsOverAsTheyFinish(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	defer d.Close()
	spy := alloctest.NewSpy(d)
	var streamsAt []int64
	var rows []probe.Result
	require.NoError(t, probe.Stream(spy, alloc.Global, 1, func(r probe.Result) {
		streamsAt = append(streamsAt, spy.Calls(alloctest.MethodCreateStream))
		rows = append(rows, r)
	}))
	require.Len(t, rows, len(probe.OpsFor(spy)))
	require.LessOrEqual(t, streamsAt[0], int64(2), "the first row came before the others ran")
	require.Greater(t, spy.Calls(alloctest.MethodCreateStream), int64(len(probe.Ops())), "every row ran on its own allocator")
	for i := 1; i < len(streamsAt); i++ {
		require.Greater(t, streamsAt[i], streamsAt[i-1], "row %d arrived after its own probe only", i)
	}
}
