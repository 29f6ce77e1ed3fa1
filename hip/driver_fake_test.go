package hip

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

func TestFakeOpenBindsPoolAndStreams(t *testing.T) {
	d, log := openFake(t, Options{StreamPriority: -2})
	lines := log.Lines()
	require.Len(t, find(lines, "hipMemPoolCreate allocType=1 handleTypes=0 locationType=1 locationId=0 zeroTail=1"), 1, "%v", lines)
	require.Len(t, find(lines, "threshold=18446744073709551615"), 1, "default threshold is UINT64_MAX: %v", lines)
	require.Len(t, find(lines, "hipDeviceGetName len=256 device=0"), 1, "the name comes from hipDeviceGetName, not hipGetDeviceProperties")
	require.Len(t, find(lines, "hipGetDeviceCount"), 1, "the loader probes for a device once")
	d2, err := New(Options{})
	require.NoError(t, err)
	require.NoError(t, d2.Close())
	require.Empty(t, find(log.Lines(), "hipGetDeviceCount"), "a second open of the loaded library does not probe again")
	require.Contains(t, d.Info().Name, "Fake AMD GPU 0")
	require.Contains(t, d.Info().Name, "HIP runtime 6.1.0")
	require.Equal(t, int64(1<<30), d.Info().TotalMemory)
	require.Equal(t, Alignment, d.Info().Alignment)
	require.Equal(t, "hip", d.CaptureDomain())

	s, err := d.CreateStream()
	require.NoError(t, err)
	require.Len(t, find(log.Lines(), "hipStreamCreateWithPriority flags=1 priority=-2"), 1)
	require.NoError(t, d.DestroyStream(s))
	require.ErrorIs(t, d.DestroyStream(s), alloc.ErrInvalidValue, "a destroyed stream is refused before HIP")
}

func TestFakeOptionsReachTheRuntime(t *testing.T) {
	_, log := openFake(t, Options{ReleaseThreshold: 8 << 30, Reserve: 1 << 20, DefaultPool: true})
	lines := log.Lines()
	require.Len(t, find(lines, "hipDeviceGetDefaultMemPool device=0"), 1)
	require.Empty(t, find(lines, "hipMemPoolCreate"), "default_pool uses the device's pool")
	require.Len(t, find(lines, fmt.Sprintf("threshold=%d", 8<<30)), 1)
	require.Len(t, find(lines, "hipMallocFromPoolAsync n=1048576"), 1, "reserve allocates once")
	require.Len(t, find(lines, "hipFreeAsync"), 1, "and frees it")
}

func TestFakeMarshalling(t *testing.T) {
	d, log := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	host, err := d.HostAlloc(64)
	require.NoError(t, err)
	p, err := d.MallocAsync(64, s)
	require.NoError(t, err)
	q, err := d.MallocAsync(64, s)
	require.NoError(t, err)
	copy(host, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	log.Lines()

	require.NoError(t, d.CopyHtoDAsync(p, host[:32], s))
	require.NoError(t, d.CopyDtoDAsync(q, p, 32, s))
	require.NoError(t, d.MemsetAsync(q+32, 0x5a, 32, s))
	require.NoError(t, d.CopyDtoHAsync(host, q, s))
	require.NoError(t, d.StreamSynchronize(s))
	require.Equal(t, "0123456789abcdef0123456789abcdef"+strings.Repeat("Z", 32), string(host))

	lines := log.Lines()
	hp, sp := fmt.Sprintf("%p", &host[0]), fmt.Sprintf("%#x", uint64(s))
	require.Len(t, find(lines, "hipHostMalloc"), 0)
	require.Len(t, find(lines, "hipMemcpyAsync", fmt.Sprintf("dst=%#x", uint64(p)), "src="+hp, "n=32 kind=1", "stream="+sp), 1, "%v", lines)
	require.Len(t, find(lines, "hipMemcpyAsync", fmt.Sprintf("dst=%#x src=%#x n=32 kind=3", uint64(q), uint64(p))), 1, "%v", lines)
	require.Len(t, find(lines, "hipMemsetAsync", fmt.Sprintf("dst=%#x value=90 n=32", uint64(q+32))), 1, "%v", lines)
	require.Len(t, find(lines, "hipMemcpyAsync", "dst="+hp, fmt.Sprintf("src=%#x n=64 kind=2", uint64(q))), 1, "%v", lines)

	// Pageable memory: refused for the async copies before CUDA, accepted
	// by the blocking ones, which synchronize.
	page := make([]byte, 16)
	require.ErrorIs(t, d.CopyHtoDAsync(p, page, s), alloc.ErrInvalidValue)
	require.ErrorIs(t, d.CopyDtoHAsync(page, p, s), alloc.ErrInvalidValue)
	require.ErrorIs(t, d.CopyHtoDAsync(p, unsafe.Slice(&host[60], 8), s), alloc.ErrInvalidValue, "a span running past the pinned buffer")
	require.Empty(t, find(log.Lines(), "hipMemcpyAsync"))
	require.NoError(t, d.CopyHtoD(p, []byte("pageable bytes!!"), s))
	require.NoError(t, d.CopyDtoH(page, p, s))
	require.Equal(t, "pageable bytes!!", string(page))
	lines = log.Lines()
	require.Len(t, find(lines, "hipStreamSynchronize"), 2, "%v", lines)

	require.NoError(t, d.FreeAsync(p, s))
	require.NoError(t, d.FreeAsync(q, s))
	require.NoError(t, d.HostFree(host))
	require.ErrorIs(t, d.HostFree(host), alloc.ErrInvalidValue)
	lines = log.Lines()
	require.Len(t, find(lines, "hipHostFree "+hp), 1, "%v", lines)
}

func TestFakeHostAllocIsPortable(t *testing.T) {
	d, log := openFake(t, Options{})
	b, err := d.HostAlloc(4096)
	require.NoError(t, err)
	require.Len(t, b, 4096)
	require.Len(t, find(log.Lines(), "hipHostMalloc n=4096 flags=1"), 1)
	require.NoError(t, d.HostFree(b))
}

func TestFakeGraphInstantiateFlags(t *testing.T) {
	d, log := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	for _, autoFree := range []bool{false, true} {
		require.NoError(t, d.BeginCapture(s, alloc.Relaxed))
		p, err := d.MallocAsync(256, s)
		require.NoError(t, err)
		require.NoError(t, d.MemsetAsync(p, 7, 256, s))
		g, err := d.EndCapture(s)
		require.NoError(t, err)
		e, err := d.GraphInstantiate(g, autoFree)
		require.NoError(t, err)
		want := "flags=0"
		if autoFree {
			want = "flags=1"
		}
		lines := log.Lines()
		require.Len(t, find(lines, "hipGraphInstantiateWithFlags", want), 1, "%v", lines)
		require.Len(t, find(lines, "hipStreamBeginCapture", "mode=2"), 1, "%v", lines)
		require.NoError(t, d.GraphLaunch(e, s))
		require.NoError(t, d.GraphExecDestroy(e))
		require.NoError(t, d.GraphDestroy(g))
		require.NoError(t, d.FreeAsync(p, s))
	}
}

// Global and ThreadLocal captures must end on the thread that began them
// (the fake returns 908 otherwise, as CUDA does). The goroutines here hop
// threads freely; the driver's capture thread makes it work every time.
func TestFakeCaptureEndsOnTheBeginningThread(t *testing.T) {
	d, _ := openFake(t, Options{})
	for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
		t.Run(mode.String(), func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := d.CreateStream()
					if err != nil {
						errs <- err
						return
					}
					if err := d.BeginCapture(s, mode); err != nil {
						errs <- err
						return
					}
					runtime.Gosched()
					done := make(chan error)
					go func() { // end from another goroutine, likely another thread
						g, err := d.EndCapture(s)
						if err == nil {
							err = d.GraphDestroy(g)
						}
						done <- err
					}()
					if err := <-done; err != nil {
						errs <- err
					}
					errs <- d.DestroyStream(s)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

// A ThreadLocal capture forbids unsafe calls on its own thread only: a
// synchronous allocation from elsewhere must neither fail nor invalidate
// it. A Global capture forbids them everywhere, and CUDA's refusal (900)
// arrives as alloc.ErrCaptureIllegalOp, after which the capture ends
// invalidated (901).
func TestFakeUnsafeCallsDuringCapture(t *testing.T) {
	d, _ := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)

	require.NoError(t, d.BeginCapture(s, alloc.ThreadLocal))
	p, err := d.Malloc(1024)
	require.NoError(t, err, "hipMalloc runs on the dev thread, not the capturing one")
	require.NoError(t, d.Free(p))
	st, err := d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, alloc.DriverCaptureActive, st)
	g, err := d.EndCapture(s)
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g))

	require.NoError(t, d.BeginCapture(s, alloc.Global))
	_, err = d.Malloc(1024)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.Contains(t, err.Error(), "hipMalloc: stream capture unsupported (hipErrorStreamCaptureUnsupported, 900)")
	st, err = d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, alloc.DriverCaptureInvalidated, st)
	_, err = d.EndCapture(s)
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.Contains(t, err.Error(), "901")
	st, err = d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, alloc.DriverCaptureNone, st)
}

// With device 1, every call that depends on the current device runs with
// device 1 current, whatever thread the calling goroutine is on.
func TestFakeDeviceIsCurrentForDeviceCalls(t *testing.T) {
	t.Setenv("FAKE_HIP_DEVICES", "2")
	d, log := openFake(t, Options{Device: 1})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.CreateStream()
			require.NoError(t, err)
			p, err := d.Malloc(256)
			require.NoError(t, err)
			require.NoError(t, d.Free(p))
			h, err := d.HostAlloc(256)
			require.NoError(t, err)
			require.NoError(t, d.HostFree(h))
			require.NoError(t, d.DestroyStream(s))
		}()
	}
	wg.Wait()
	lines := log.Lines()
	for _, fn := range []string{"hipMemPoolCreate", "hipMemGetInfo", "hipStreamCreateWithPriority", "hipMalloc ", "hipFree ", "hipHostMalloc", "hipHostFree"} {
		calls := find(lines, fn)
		require.NotEmpty(t, calls, fn)
		require.Equal(t, calls, find(calls, "dev=1 "), "%s must run with device 1 current", fn)
	}
	require.Len(t, find(lines, "locationId=1"), 1)
}

func TestFakeDeviceMissingIsUnavailable(t *testing.T) {
	fakeLib(t)
	_, err := New(Options{Device: 3})
	require.ErrorIs(t, err, alloc.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "device 3 requested, 1 present")
}

// hipDeviceAttributeMemoryPoolsSupported (88 in hip_runtime_api.h, not
// CUDA's 115) reads 0 by default on ROCm 5.6 to 6.1 although pools work:
// the driver warns and opens. Where it reads 1, no warning.
func TestFakePoolsAttributeDoesNotRefuse(t *testing.T) {
	d, log := openFake(t, Options{})
	require.Len(t, find(log.Lines(), "hipDeviceGetAttribute attr=88 device=0"), 1)
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "hipDeviceAttributeMemoryPoolsSupported = 0")

	t.Setenv("FAKE_HIP_POOLS_ATTR", "1")
	d, _ = openFake(t, Options{})
	require.NotContains(t, strings.Join(d.Warnings(), "\n"), "MemoryPoolsSupported")
}

// Runtime error codes reach callers as typed errors with the code and the
// runtime's text.
func TestFakeErrorsKeepCodeAndText(t *testing.T) {
	d, _ := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	for _, c := range []struct {
		fail string
		want error
		text string
		do   func() error
	}{
		{"hipMallocFromPoolAsync:2", alloc.ErrOutOfMemory, "out of memory (hipErrorOutOfMemory, 2)", func() error { _, err := d.MallocAsync(64, s); return err }},
		{"hipStreamSynchronize:900", alloc.ErrCaptureIllegalOp, "stream capture unsupported (hipErrorStreamCaptureUnsupported, 900)", func() error { return d.StreamSynchronize(s) }},
		{"hipMemsetAsync:1", alloc.ErrInvalidValue, "invalid value (hipErrorInvalidValue, 1)", func() error { return d.MemsetAsync(1, 0, 1, s) }},
		{"hipStreamBeginCapture:801", alloc.ErrCaptureUnavailable, "not supported (hipErrorNotSupported, 801)", func() error { return d.BeginCapture(s, alloc.Global) }},
		{"hipGraphLaunch:719", alloc.ErrDriver, `launch failure (hipErrorLaunchFailure, 719) "hipErrorUnknown"`, func() error { return d.GraphLaunch(1, s) }},
	} {
		t.Setenv("FAKE_HIP_FAIL", c.fail)
		err := c.do()
		require.ErrorIs(t, err, c.want, c.fail)
		fn, code, _ := strings.Cut(c.fail, ":")
		require.Contains(t, err.Error(), fn+": "+c.text)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, code, fmt.Sprint(e.Code))
	}
}

func TestFakeQueryAndClosed(t *testing.T) {
	d, _ := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	done, err := d.StreamQuery(s)
	require.NoError(t, err)
	require.True(t, done)
	t.Setenv("FAKE_HIP_FAIL", "hipStreamQuery:600")
	done, err = d.StreamQuery(s)
	require.NoError(t, err, "hipErrorNotReady is an answer, not an error")
	require.False(t, done)
	t.Setenv("FAKE_HIP_FAIL", "")
	h, err := d.HostAlloc(8)
	require.NoError(t, err)
	_ = h
	require.NoError(t, d.Close(), "close frees the registered host buffer and stream")
	require.ErrorIs(t, d.Close(), alloc.ErrClosed)
	_, err = d.MallocAsync(8, s)
	require.ErrorIs(t, err, alloc.ErrClosed)
	_, err = d.Malloc(8)
	require.ErrorIs(t, err, alloc.ErrClosed)
	require.ErrorIs(t, d.BeginCapture(s, alloc.Global), alloc.ErrClosed)
}
