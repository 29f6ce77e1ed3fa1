package symheap_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/symheap"
)

// Ranks of one process on several fake devices (issue 32): the open
// enables peer access from each rank's device to every other device of
// its peers, and the fakes fail work on one device that touches another's
// memory without it, with the runtime's illegal-address code.

// Every collective, eager and captured with fresh data, over 2 and 4
// devices and a mixed topology (two ranks on one device, two on
// another); each rank's device enabled access to every other device of
// its peers (and no device to itself), once per pair.
func TestFakeCollectivesAcrossDevices(t *testing.T) {
	for _, devices := range [][]int{{0, 1}, {0, 1, 2, 3}, {0, 0, 1, 1}} {
		t.Run(fmt.Sprint(devices), func(t *testing.T) {
			forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
				t.Setenv(v.env+"DEVICES", "4")
				w := openTopoOK(t, v, devices, 20*time.Second, nil)
				lines := log.Lines()
				for _, d := range devices {
					for _, e := range devices {
						enables := gpurttest.Find(lines, fmt.Sprintf("dev=%d %sDeviceEnablePeerAccess peer=%d flags=0", d, v.name, e))
						if d == e {
							require.Empty(t, enables, "device %d to itself", d)
						} else {
							require.NotEmpty(t, enables, "device %d to %d", d, e)
						}
					}
				}
				runCollectives(t, w)
				if len(devices) == 4 {
					require.NotEmpty(t, gpurttest.Find(log.Lines(), v.launch+" kernel=", fmt.Sprintf("grid=%d,1,1", kernels.MaxBlocks)),
						"the ranks launched full grids")
					requireFewMappings(t)
				}
			})
		})
	}
}

// requireFewMappings checks, where /proc says, that the process holds far
// fewer memory mappings than Linux allows one (vm.max_map_count, 65530 by
// default) just after full-grid launches on four devices: the fakes'
// workers, still alive, hold one mapping each for their fibers' stacks,
// not two per fiber (internal/kernels/collectives.cu), and the race
// detector's own mappings share the limit.
func requireFewMappings(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Logf("mappings not counted: %v", err)
		return
	}
	n := bytes.Count(b, []byte("\n"))
	t.Logf("%d memory mappings", n)
	require.Less(t, n, 8192, "memory mappings held after full-grid launches on four devices")
}

// noEnable is a driver whose EnablePeerAccess does nothing: the open
// thinks peer access is on when it is not.
type noEnable struct{ peerDriver }

// peerDriver is what a device heap uses of a fake's driver.
type peerDriver interface {
	driver.Driver
	driver.IPCMemory
	driver.KernelLauncher
	driver.PeerAccess
}

func (noEnable) EnablePeerAccess(int) error { return nil }

// Without the enable, the fakes fail a rank's copy from a peer's heap on
// another device with 700 (illegal address), as a GPU faults; with it the
// same copy works; a collective fails too (the kernels' accesses are
// checked as the copies are).
func TestFakeMissingPeerEnableFaults(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		t.Setenv(v.env+"DEVICES", "2")
		for _, enable := range []bool{false, true} {
			t.Run(fmt.Sprintf("enabled=%v", enable), func(t *testing.T) {
				var wrap func(driver.Driver) driver.Driver
				if !enable {
					wrap = func(d driver.Driver) driver.Driver { return noEnable{d.(peerDriver)} }
				}
				w := openTopoOK(t, v, []int{0, 1}, 2*time.Second, wrap)
				h := w.heaps[0]
				x, err := h.Alloc(256)
				require.NoError(t, err)
				_, err = w.heaps[1].Alloc(256)
				require.NoError(t, err)
				src := bytes.Repeat([]byte{7}, 256)
				require.NoError(t, w.as[1].Upload(w.heaps[1].Buffer(), symheap.SignalPadBytes+x.Off, src))
				err = h.Copy(0, x, 1, x)
				if err == nil {
					err = w.as[0].Synchronize()
				}
				if enable {
					require.NoError(t, err)
					got := make([]byte, 256)
					require.NoError(t, w.as[0].Download(got, h.Buffer(), symheap.SignalPadBytes+x.Off))
					require.Equal(t, src, got)
					return
				}
				require.Error(t, err)
				require.Contains(t, err.Error(), "700", "the illegal-address code: %v", err)
				errs := w.each(func(r int) error { return w.heaps[r].Barrier() })
				for r, err := range errs {
					if err == nil {
						err = w.heaps[r].Synchronize()
					}
					require.Error(t, err, "rank %d's barrier touched the peer's pad without peer access", r)
				}
				// The kernels' fault lost the devices, as on a GPU: start
				// them afresh for the closes (and the next subtest).
				log.ResetFaults()
				// Close marks the pads of the peers that are still open (a
				// device-to-device copy each): without peer access that
				// fails too, and says so (a peer that closed first is
				// skipped, so either rank may have nothing to copy).
				for r, err := range w.each(func(r int) error { return w.heaps[r].Close() }) {
					w.heaps[r] = nil
					if err != nil {
						require.ErrorContains(t, err, "700", "closing rank %d without peer access", r)
					}
				}
			})
		}
	})
}

// A pair of devices without peer access (FAKE_<RT>_NO_P2P) is refused at
// open on every rank, with ErrNoPeerAccess naming both devices, before
// any kernel runs: also rank 0, whose own devices reach every peer's.
func TestFakeNoP2PRefusedAtOpen(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		t.Setenv(v.env+"DEVICES", "3")
		t.Setenv(v.env+"NO_P2P", "1-2")
		w, errs := openTopo(t, v, []int{0, 1, 2}, 20*time.Second, nil)
		for r, err := range errs {
			require.ErrorIs(t, err, symheap.ErrNoPeerAccess, "rank %d", r)
			require.ErrorIs(t, err, symheap.ErrPeerOpen, "rank %d", r)
			require.Regexp(t, `rank [12] on device [12] cannot reach rank [12]'s heap on device [12]`, err.Error())
			require.Nil(t, w.heaps[r])
			require.Zero(t, w.as[r].Stats().LiveBuffers, "rank %d freed its heap", r)
		}
		require.Empty(t, gpurttest.Find(log.Lines(), v.launch), "nothing launched")
	})
}
