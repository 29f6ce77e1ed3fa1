package nccl_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/nccl"
)

// EnvFrom never panics; what it accepts is a rank inside the world and an
// NCCL_COMM_ID that splits into a host and a port in [1, 65535]. Seeds:
// the f.Add calls and testdata/fuzz/FuzzEnvFrom.
func FuzzEnvFrom(f *testing.F) {
	f.Add("0", "2", "", "node0", "29500")
	f.Add("1", "2", "", "[fe80::1]", "29500")
	f.Add("1", "4", "10.0.0.1:6000", "", "")
	f.Add("0", "1", "[fe80::1%eth0]:1", "", "")
	f.Add("0", "2", "", "[]", "1")
	f.Add("0", "2", "", "0]0", "1")
	f.Add("0", "2", "", "a", "+1")
	f.Fuzz(func(t *testing.T, rank, world, commID, addr, port string) {
		env := map[string]string{"RANK": rank, "WORLD_SIZE": world, "NCCL_COMM_ID": commID, "MASTER_ADDR": addr, "MASTER_PORT": port}
		e, err := nccl.EnvFrom(func(k string) string { return env[k] })
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrInvalidValue)
			return
		}
		require.True(t, e.Rank >= 0 && e.Rank < e.WorldSize)
		host, p, err := net.SplitHostPort(e.CommID)
		require.NoError(t, err, "CommID %q", e.CommID)
		require.NotEmpty(t, host)
		n, err := strconv.Atoi(p)
		require.NoError(t, err)
		require.True(t, n >= 1 && n <= 65535, "port %d", n)
	})
}
