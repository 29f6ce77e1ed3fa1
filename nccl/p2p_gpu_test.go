package nccl_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/nccl"
)

// On a GPU with NCCL (the kit's gpu_tests step runs every TestGPU* of this
// package): one rank sends to and receives from itself in a Group,
// broadcasts, reduces, and splits into a communicator of one that
// all-reduces, each captured with its copies and replayed with fresh data;
// one rank's result equals its input. Comm.Wait ends every replay, so the
// async-error polling runs against the real library. Skipped, with the
// reason, without a GPU or NCCL.
func TestGPUPointToPointGroupsAndSplit(t *testing.T) {
	l, a, c := oneRankOnGPU(t)
	t.Logf("NCCL %s from %s, split: %v", nccl.VersionString(l.Version), l.Path, l.HasSplit())

	const count = 1 << 12
	const n = 4 * count
	o := newOperands(t, a, n)
	send, recv := o.send, o.recv

	ops := []struct {
		name string
		call func() error
	}{
		{"self_send_recv_group", func() error {
			return l.Group(func() error {
				if err := c.Send(a, send, count, nccl.Int32, 0); err != nil {
					return err
				}
				return c.Recv(a, recv, count, nccl.Int32, 0)
			})
		}},
		{"broadcast", func() error { return c.Broadcast(a, send, recv, count, nccl.Float32, 0) }},
		{"reduce", func() error { return c.Reduce(a, send, recv, count, nccl.Int32, nccl.Sum, 0) }},
	}
	if l.HasSplit() {
		one, err := c.Split(0, 0)
		require.NoError(t, err)
		require.Equal(t, 1, one.Ranks())
		defer func() { require.NoError(t, one.Destroy()) }()
		ops = append(ops, struct {
			name string
			call func() error
		}{"split_all_reduce", func() error { return one.AllReduce(a, send, recv, count, nccl.Int32, nccl.Sum) }})
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			roundTripWait(t, a, o, 5, func(i, k int) byte { return byte(i/4*7+k*13) & 0x3f }, op.call, func() error { return c.Wait(a) })
		})
	}
}
