package gpurt_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
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

// Peer access through each runtime's calls: the fake says every pair of
// distinct devices can but those FAKE_<RT>_NO_P2P lists; enabling twice
// is success (the runtime's 704, already enabled); a pair that cannot is
// the runtime's error (217), a device that does not exist its 101; a
// negative ordinal is refused before any call, and enabling (device-wide)
// during a Global-mode capture too.
func TestFakePeerAccess(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"DEVICES", "3")
		t.Setenv(v.envPrefix+"NO_P2P", "0-2")
		d, log := openFake(t, v, opts{})
		pa := d.(driver.PeerAccess)
		require.Equal(t, 0, pa.Device())
		for peer, want := range map[int]bool{0: true, 1: true, 2: false} {
			can, err := pa.CanAccessPeer(peer)
			require.NoError(t, err)
			require.Equal(t, want, can, "device 0 to %d", peer)
		}
		log.Lines()
		require.NoError(t, pa.EnablePeerAccess(1))
		require.NoError(t, pa.EnablePeerAccess(1), "already enabled is success")
		require.Len(t, find(log.Lines(), v.prefix+"DeviceEnablePeerAccess peer=1 flags=0"), 2)
		require.NoError(t, pa.EnablePeerAccess(0), "the device itself: nothing to enable")

		err := pa.EnablePeerAccess(2)
		code, ok := v.code(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, 217, code, "peer access unsupported")
		err = pa.EnablePeerAccess(3)
		code, ok = v.code(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, 101, code, "invalid device")
		log.Lines()
		_, err = pa.CanAccessPeer(-1)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.ErrorIs(t, pa.EnablePeerAccess(-1), alloc.ErrInvalidValue)
		require.Empty(t, log.Lines())

		a, err := alloc.New(d, alloc.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		require.NoError(t, a.BeginCapture(alloc.Global))
		require.ErrorIs(t, pa.EnablePeerAccess(1), driver.ErrCaptureIllegalOp)
		endCapture(t, a)
	})
}

// A copy on one device's stream that touches another device's memory
// fails with 700 (illegal address) until peer access is enabled from the
// stream's device to the memory's: the fakes' rule, a GPU's for kernels
// (a real runtime stages such a copy instead; the fakes are stricter, so
// a missing enable shows in copies too). Their kernels' accesses follow
// it once the executor checks them.
func TestFakeCopyNeedsPeerAccess(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"DEVICES", "2")
		fakeLib(t, v)
		d0, err := v.open(opts{Device: 0})
		require.NoError(t, err)
		t.Cleanup(func() { d0.Close() })
		d1, err := v.open(opts{Device: 1})
		require.NoError(t, err)
		t.Cleanup(func() { d1.Close() })
		p0, err := d0.Malloc(256)
		require.NoError(t, err)
		p1, err := d1.Malloc(256)
		require.NoError(t, err)
		fill(t, d1, p1, bytes.Repeat([]byte{9}, 256))
		s := newStream(t, d0)
		err = d0.CopyDtoDAsync(p0, p1, 256, s)
		code, ok := v.code(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, 700, code)
		require.NoError(t, d0.(driver.PeerAccess).EnablePeerAccess(1))
		require.NoError(t, d0.CopyDtoDAsync(p0, p1, 256, s))
		require.NoError(t, d0.StreamSynchronize(s))
		require.Equal(t, bytes.Repeat([]byte{9}, 256), read(t, d0, p0, 256))
		err = d1.MemsetAsync(p0, 0, 256, newStream(t, d1))
		code, ok = v.code(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, 700, code, "peer access is one way: 1 to 0 is not enabled")
		require.NoError(t, d0.Free(p0))
		require.NoError(t, d1.Free(p1))
	})
}
