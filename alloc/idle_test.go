package alloc_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// syncCounter counts the blocking calls Synchronize and Query make.
type syncCounter struct {
	*cpu.Driver
	syncs, queries atomic.Int32
}

func (d *syncCounter) StreamSynchronize(s alloc.Stream) error {
	d.syncs.Add(1)
	return d.Driver.StreamSynchronize(s)
}

func (d *syncCounter) StreamQuery(s alloc.Stream) (bool, error) {
	d.queries.Add(1)
	return d.Driver.StreamQuery(s)
}

// On a StreamIdler, an idle stream is synchronized and queried inline with
// no blocking call; queued work still goes through the blocking call, and
// its failure is reported either way.
func TestSynchronizeIdleStreamInline(t *testing.T) {
	inner, err := cpu.New(cpu.Options{MemoryLimit: 1 << 20})
	require.NoError(t, err)
	defer inner.Close()
	d := &syncCounter{Driver: inner}
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()

	require.NoError(t, a.Synchronize())
	done, err := a.Query()
	require.NoError(t, err)
	require.True(t, done)
	require.Zero(t, d.syncs.Load()+d.queries.Load(), "idle: no blocking call")

	buf, err := a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.Memset(buf, 0, 1, 256))
	require.NoError(t, a.Synchronize())
	require.EqualValues(t, 1, d.syncs.Load(), "work queued: the watched synchronize runs it")

	boom := errors.New("host function failed")
	require.NoError(t, a.LaunchHostFunc(func() error { return boom }))
	require.ErrorIs(t, a.Synchronize(), boom)
	require.NoError(t, a.Synchronize(), "reported once")
	require.NoError(t, a.Free(buf))
}
