package gpurt_test

// Linux only: these tests tell OS threads apart by their thread id.

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
)

// OnDevice runs its function on the driver's device thread: one locked OS
// thread, the same at every call, with the device made current there; it
// fails with ErrClosed after Close.
func TestFakeOnDevice(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		require.Len(t, find(log.Lines(), v.fn("SetDevice")), 2, "the device made current at open, on the device and capture threads")
		var tids []int
		for range 3 {
			require.NoError(t, d.OnDevice("probe", func() error {
				runtime.Gosched()
				tids = append(tids, unix.Gettid())
				return nil
			}))
		}
		require.Equal(t, tids[0], tids[1], "the same OS thread every time")
		require.Equal(t, tids[0], tids[2])
		require.NotEqual(t, unix.Gettid(), tids[0], "not the caller's thread")
		boom := errors.New("boom")
		require.ErrorIs(t, d.OnDevice("probe", func() error { return boom }), boom)
		require.Empty(t, find(log.Lines(), v.fn("SetDevice")), "OnDevice does not set the device again")
		require.NoError(t, d.Close())
		err := d.OnDevice("probe", func() error { return nil })
		require.ErrorIs(t, err, alloc.ErrClosed)
		require.Contains(t, err.Error(), v.name+": probe: driver is closed")
	})
}

// CUDA runs host functions on a thread of its own, which Go did not make,
// and HIP is assumed to (not seen on an AMD GPU):
// the trampoline's Go side is entered from a foreign thread (with
// CGO_ENABLED=0 through purego's fakecgo). The fake built with
// -DFAKE_HOSTFN_THREAD does the same, so eager and replayed host functions,
// and a failing one, are checked on such a thread without a GPU. Run it
// with CGO_ENABLED=0 too: `CGO_ENABLED=0 go test -run HostFuncOnForeignThread ./internal/gpurt`.
func TestHostFuncOnForeignThread(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		lib := fakeLib(t, v, "-DFAKE_HOSTFN_THREAD")
		h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			t.Fatal(err)
		}
		tidSym, err := purego.Dlsym(h, "fake_hostfn_tid")
		if err != nil {
			t.Fatal(err)
		}
		hostTid := func() int { r, _, _ := purego.SyscallN(tidSym); return int(r) }
		d, err := v.open(opts{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		a, err := alloc.New(d, alloc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()

		var ran atomic.Int64
		var tid atomic.Int64
		fn := func() error {
			ran.Add(1)
			tid.Store(int64(unix.Gettid()))
			return nil
		}
		if err := a.LaunchHostFunc(fn); err != nil {
			t.Fatal(err)
		}
		if err := a.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if ran.Load() != 1 || tid.Load() != int64(hostTid()) || tid.Load() == 0 {
			t.Fatalf("eager host function: ran %d times on thread %d, the fake's host thread is %d", ran.Load(), tid.Load(), hostTid())
		}

		var input atomic.Int64
		var seen []int64
		g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
			return a.LaunchHostFunc(func() error {
				seen = append(seen, input.Load()) // read at run time, on the host thread
				return fn()
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for k := int64(1); k <= 3; k++ {
			input.Store(10 * k)
			if err := g.Launch(); err != nil {
				t.Fatal(err)
			}
			if err := a.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if tid.Load() != int64(hostTid()) {
				t.Fatalf("replay %d ran on thread %d, the fake's host thread is %d", k, tid.Load(), hostTid())
			}
		}
		if len(seen) != 3 || seen[0] != 10 || seen[2] != 30 {
			t.Fatalf("replays saw %v, want [10 20 30]", seen)
		}

		boom := errors.New("boom")
		if err := a.LaunchHostFunc(func() error { return boom }); err != nil {
			t.Fatal(err)
		}
		if err := a.Synchronize(); !errors.Is(err, boom) {
			t.Fatalf("a failing host function on the foreign thread: synchronize returned %v", err)
		}
	})
}
