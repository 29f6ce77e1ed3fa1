package gpurt_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/kernels"
)

// The occupancy each driver reads through its runtime's call (cuda: the
// driver API's cuOccupancyMaxActiveBlocksPerMultiprocessor; hip:
// hipModuleOccupancyMaxActiveBlocksPerMultiprocessor), per kernel and
// block size, as the fake's FAKE_<RT>_BLOCKS_PER_SM and THREADS_PER_SM
// set it; the device's PCI bus id in the module; the refusals before
// any call; and a runtime without the call: errors.ErrUnsupported.
func TestFakeMaxActiveBlocks(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"BLOCKS_PER_SM", kernels.AllReduceTwoShot+"=2,"+kernels.Barrier+"=5,*=3")
		t.Setenv(v.envPrefix+"DEVICES", "2")
		d, m, log := kernelDriver(t, v, opts{Device: 1})
		require.Equal(t, 1, m.Device)
		require.Equal(t, "0000:11:00.0", m.DeviceID, "the fake's bus id of device 1")
		for name, want := range map[string]int{kernels.AllReduceTwoShot: 2, kernels.Barrier: 5, kernels.AllGather: 3} {
			n, err := d.MaxActiveBlocks(m.Kernels[name], 64)
			require.NoError(t, err)
			require.Equal(t, want, n, name)
		}
		require.NotEmpty(t, find(log.Lines(), "OccupancyMaxActiveBlocksPerMultiprocessor kernel="+kernels.AllReduceTwoShot+" block=64 shared=0 -> 2"))

		t.Setenv(v.envPrefix+"BLOCKS_PER_SM", "")
		t.Setenv(v.envPrefix+"THREADS_PER_SM", "1536")
		n, err := d.MaxActiveBlocks(m.Kernels[kernels.AllGather], 64)
		require.NoError(t, err)
		require.Equal(t, 1536/64, n, "threads per multiprocessor / block")
		log.Lines()

		_, err = d.MaxActiveBlocks(m.Kernels[kernels.AllGather], 65)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "over the device's 64 threads a block")
		_, err = d.MaxActiveBlocks(m.Kernels[kernels.AllGather], 0)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		_, err = d.MaxActiveBlocks(12345, 64)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Empty(t, find(log.Lines(), "Occupancy"), "refused before any call")
	})
}

func TestFakeMaxActiveBlocksMissing(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		lib := fakeLib(t, v, "-DFAKE_NO_OCCUPANCY")
		d, err := v.openKernels(lib, opts{})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		m, err := d.LoadModule(kernels.Image())
		require.NoError(t, err, "the occupancy call is optional")
		_, err = d.MaxActiveBlocks(m.Kernels[kernels.Barrier], 64)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.Contains(t, err.Error(), fmt.Sprintf("the runtime has no %sOccupancyMaxActiveBlocksPerMultiprocessor", map[string]string{"cuda": "cu", "hip": "hipModule"}[v.name]))
	})
}
