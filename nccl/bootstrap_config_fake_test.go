package nccl_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/nccl"
)

// torchrun's variables with a config: the id comes from NCCL_COMM_ID as
// for InitFromEnv, the communicator from ncclCommInitRankConfig with the
// config, and the variable is gone afterwards. A config NCCL would refuse
// is refused before the environment is touched or NCCL is called.
func TestInitFromEnvConfig(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		torchrunEnv(t)
		_, err := f.l.InitFromEnvConfig(&onCaller{}, nccl.Config{MinCTAs: 2})
		require.ErrorIs(t, err, nccl.ErrBadConfig)
		require.Zero(t, f.lastConfig(t).count, "no config reached NCCL")

		c, err := f.l.InitFromEnvConfig(&onCaller{}, nccl.Config{MaxCTAs: 4})
		require.NoError(t, err)
		requireJoinedFromEnv(t, f)
		r := f.lastConfig(t)
		require.EqualValues(t, 4, r.maxCTAs)
		require.EqualValues(t, undef, r.minCTAs)
		require.Equal(t, 1, r.count)
		require.NoError(t, c.Destroy())
		require.Zero(t, f.live(t))
	})
}

// The file rendezvous with a config: every rank's communicator is made
// with it from the one published id; a bad config publishes nothing, so
// no rank waits on an id whose root never starts.
func TestInitFromFileConfig(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		path := filepath.Join(privateDir(t), "nccl-id")
		_, err := f.l.InitFromFileConfig(&onCaller{}, path, 2, 0, time.Second, nccl.Config{MaxCTAs: -1})
		require.ErrorIs(t, err, nccl.ErrBadConfig)
		_, err = os.Stat(path)
		require.True(t, errors.Is(err, fs.ErrNotExist), "a refused config published an id: %v", err)

		const ranks = 2
		joinRanks(t, ranks, func(r int) error {
			c, err := f.l.InitFromFileConfig(&onCaller{}, path, ranks, r, 5*time.Second, nccl.Config{Blocking: nccl.Blocks, MaxCTAs: 2})
			if err == nil {
				err = c.Destroy()
			}
			return err
		})
		r := f.lastConfig(t)
		require.Equal(t, ranks, r.count, "every rank passed the config")
		require.EqualValues(t, 1, r.blocking)
		require.EqualValues(t, 2, r.maxCTAs)
		require.Zero(t, f.live(t))
	})
}
