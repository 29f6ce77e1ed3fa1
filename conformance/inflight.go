package conformance

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allocipc"
)

// inFlight: a blocking call that uses a buffer (a pageable copy, an IPC
// export) makes its driver call without holding the allocator's lock.
// Whatever releases the buffer meanwhile (its graph's Close, Free, the
// allocator's Close) must not free its memory, or hand it out again, under
// the call: the call completes, or fails with ErrInvalidBuffer before it
// reaches the driver, and the memory goes back once the call is done. On a
// GPU a copy into freed memory is an illegal-address fault that poisons the
// context for every allocator in the process; cpu refuses such a copy
// with an error, which the suite sees.
func (s *suite) inFlight(t *testing.T) {
	t.Run("abandoned", s.inFlightAbandoned)
	for _, use := range inFlightUses {
		for _, rel := range inFlightReleases {
			if use.ipc && !rel.ipc {
				continue
			}
			t.Run(use.name+"/"+rel.name, func(t *testing.T) { s.releaseWaitsForInFlightUse(t, use, rel) })
		}
	}
}

// inFlightBytes is the size of the buffers the calls use.
const inFlightBytes = 8192

// inFlightUse is a blocking call that uses a buffer.
type inFlightUse struct {
	name   string
	method alloctest.Method // held in the spy while the buffer is released
	ipc    bool             // needs driver.IPCMemory; exports AllocSync memory only
	do     func(a *alloc.Allocator, b alloc.Buffer) error
}

var inFlightUses = []inFlightUse{
	{"upload", alloctest.MethodCopyHtoD, false, func(a *alloc.Allocator, b alloc.Buffer) error {
		return a.Upload(b, 0, pattern(int(b.Size()), 21))
	}},
	{"download", alloctest.MethodCopyDtoH, false, func(a *alloc.Allocator, b alloc.Buffer) error {
		return a.Download(make([]byte, b.Size()), b, 0)
	}},
	{"ipc_export", alloctest.MethodIPCGetMemHandle, true, func(a *alloc.Allocator, b alloc.Buffer) error {
		_, err := allocipc.Export(a, b)
		return err
	}},
}

// inFlightRelease is a way the buffer is released while the call uses it.
type inFlightRelease struct {
	name   string
	ipc    bool // usable with an IPC export (the buffer is AllocSync memory)
	closes bool // releases by closing the allocator
	// make makes the buffer and returns it with its release.
	make func(t *testing.T, e *env) (alloc.Buffer, func() error)
}

var inFlightReleases = []inFlightRelease{
	{"graph_close", false, false, func(t *testing.T, e *env) (alloc.Buffer, func() error) {
		g, b := graphWithBuffer(t, e.a)
		launch(t, e.a, g) // a launch makes the graph's allocation real on every backend
		return b, g.Close
	}},
	{"free", false, false, func(t *testing.T, e *env) (alloc.Buffer, func() error) {
		b := mustAlloc(t, e.a, inFlightBytes)
		return b, func() error { return e.a.Free(b) }
	}},
	{"free_sync", true, false, func(t *testing.T, e *env) (alloc.Buffer, func() error) {
		b, err := e.a.AllocSync(inFlightBytes)
		require.NoError(t, err)
		return b, func() error { return e.a.Free(b) }
	}},
	{"allocator_close", true, true, func(t *testing.T, e *env) (alloc.Buffer, func() error) {
		b, err := e.a.AllocSync(inFlightBytes)
		require.NoError(t, err)
		mustAlloc(t, e.a, inFlightBytes) // pool memory too
		return b, func() error { return e.close(e.a) }
	}},
}

// releaseWaitsForInFlightUse: while use is held in the driver, rel
// releases its buffer; the memory is not handed out again under the call,
// the call completes or is refused before the driver, and the memory goes
// back once the call is done.
func (s *suite) releaseWaitsForInFlightUse(t *testing.T, use inFlightUse, rel inFlightRelease) {
	e := s.env(t)
	if _, ok := e.drv.(driver.IPCMemory); use.ipc && !ok {
		t.Logf("%s has no IPC memory handles: nothing to export", e.drv.Name())
		return
	}
	dev0, reports := liveBytes(e.drv)
	host0, _ := hostBytes(e.drv)
	b, release := rel.make(t, e)
	size := b.Size()

	unblock := e.spy.Block(use.method)
	defer unblock()
	useErr := make(chan error, 1)
	go func() { useErr <- use.do(e.a, b) }()
	eventually(t, "the call reached the driver", func() bool { return e.spy.Waiting(use.method) == 1 })

	relErr := make(chan error, 1)
	go func() { relErr <- release() }()
	released := false
	select {
	case err := <-relErr: // released without waiting for the call
		released = true
		checkRelease(t, rel.closes, err)
		if !rel.closes {
			x := mustAlloc(t, e.a, size)
			assert.False(t, overlaps(x.Ptr(), x.Size(), b.Ptr(), size),
				"memory released while a call still uses it was handed out again")
			require.NoError(t, e.a.Free(x))
		}
	case <-time.After(50 * time.Millisecond): // the release waits for the call: allowed
	}

	unblock()
	err := alloctest.ReturnsWithin(t, wdSlack, use.name, func() error { return <-useErr })
	if err != nil {
		require.ErrorIs(t, err, alloc.ErrInvalidBuffer,
			"a call racing the release may only be refused before the driver call, never reach freed memory")
	}
	if !released {
		checkRelease(t, rel.closes, alloctest.ReturnsWithin(t, wdSlack, rel.name, func() error { return <-relErr }))
	}
	if !rel.closes {
		eventually(t, "the memory given back once the call was done", func() bool {
			require.NoError(t, e.a.Trim())
			require.NoError(t, e.a.Synchronize())
			n, _ := liveBytes(e.drv)
			return !reports || n == dev0
		})
		return
	}
	eventually(t, "the closed allocator's memory given back once the call was done", func() bool {
		n, _ := liveBytes(e.drv)
		hn, _ := hostBytes(e.drv)
		return !reports || n == dev0 && hn == host0
	})
}

// inFlightAbandoned: the same race when the call outlives the watchdog.
// The caller gets ErrCaptureTimeout while the call is still in the driver;
// the buffer's graph, or the allocator, closed meanwhile keeps the memory
// (and the stream) until the call finally returns, and then gives it back.
// Nobody sees the abandoned call's result, so the driver's answer to it is
// counted: it must not be an error on freed memory or a destroyed stream.
func (s *suite) inFlightAbandoned(t *testing.T) {
	for _, rel := range []struct {
		name   string
		closes bool
	}{{"graph_close", false}, {"allocator_close", true}} {
		t.Run("upload/"+rel.name, func(t *testing.T) {
			e := s.env(t)
			drv := &copyFailures{Spy: e.spy}
			a, err := alloc.New(drv, alloc.Options{Watchdog: wdDeadline})
			require.NoError(t, err)
			closed := false
			t.Cleanup(func() {
				if !closed {
					assert.NoError(t, a.Close())
				}
			})
			dev0, reports := liveBytes(e.drv)
			g, b := graphWithBuffer(t, a)
			launch(t, a, g)

			unblock := e.spy.Block(alloctest.MethodCopyHtoD)
			defer unblock()
			err = alloctest.ReturnsWithin(t, wdSlack, "Upload", func() error { return a.Upload(b, 0, pattern(int(b.Size()), 22)) })
			require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
			require.EqualValues(t, 1, e.spy.Waiting(alloctest.MethodCopyHtoD), "the copy is still in the driver")
			if rel.closes {
				closed = true
				require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, "Close", a.Close), alloc.ErrLeaked)
			} else {
				require.NoError(t, alloctest.ReturnsWithin(t, wdSlack, "Graph.Close", g.Close))
			}
			unblock()
			eventually(t, "the abandoned copy returned", func() bool { return drv.returned.Load() == 1 })
			require.NoError(t, drv.firstErr(), "the abandoned copy reached the driver after its memory or stream was gone")
			if !rel.closes {
				eventually(t, "the allocator usable again", func() bool { return a.Synchronize() == nil })
				require.NoError(t, a.Trim())
				require.NoError(t, a.Synchronize())
			}
			eventually(t, "the memory given back once the abandoned call returned", func() bool {
				n, _ := liveBytes(e.drv)
				return !reports || n == dev0
			})
		})
	}
}

// copyFailures records what the driver answered to blocking host-to-device
// copies, which an abandoned call's caller never sees.
type copyFailures struct {
	*alloctest.Spy
	returned atomic.Int64
	mu       sync.Mutex
	err      error
}

func (d *copyFailures) CopyHtoD(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	err := d.Spy.CopyHtoD(dst, src, s)
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
	d.returned.Add(1)
	return err
}

func (d *copyFailures) firstErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// checkRelease checks a release's error: none, or for the allocator's
// Close the leak report (the buffer was alive).
func checkRelease(t *testing.T, closes bool, err error) {
	t.Helper()
	if closes {
		require.ErrorIs(t, err, alloc.ErrLeaked)
		return
	}
	require.NoError(t, err)
}
