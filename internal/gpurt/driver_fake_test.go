package gpurt_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// What both drivers do with every bound call, over the fakes: the
// arguments that reach the runtime (the fake logs each call), the threads
// calls run on, refusals before the runtime, codes mapped to sentinels.

// The open binds a pool of the driver's own, with the default threshold
// (UINT64_MAX), and streams with the configured priority and the
// non-blocking flag; each vendor's own tests check how it names the
// device.
func TestFakeOpenBindsPoolAndStreams(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{StreamPriority: -2})
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("MemPoolCreate")+" allocType=1 handleTypes=0 locationType=1 locationId=0 zeroTail=1"), 1, "%v", lines)
		require.Len(t, find(lines, "threshold=18446744073709551615"), 1, "default threshold is UINT64_MAX: %v", lines)
		require.Equal(t, int64(1<<30), d.Info().TotalMemory)
		require.Equal(t, int64(256), d.Info().Alignment)
		require.Equal(t, v.name, d.CaptureDomain())
		require.Equal(t, v.name, d.Name())

		s := newStream(t, d)
		require.Len(t, find(log.Lines(), v.fn("StreamCreateWithPriority")+" flags=1 priority=-2"), 1)
		require.NoError(t, d.DestroyStream(s))
		require.ErrorIs(t, d.DestroyStream(s), alloc.ErrInvalidValue, "a destroyed stream is refused before the runtime")
	})
}

func TestFakeOptionsReachTheRuntime(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		_, log := openFake(t, v, opts{ReleaseThreshold: 8 << 30, Reserve: 1 << 20, DefaultPool: true})
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("DeviceGetDefaultMemPool")+" device=0"), 1)
		require.Empty(t, find(lines, v.fn("MemPoolCreate")), "default_pool uses the device's pool")
		require.Len(t, find(lines, fmt.Sprintf("threshold=%d", 8<<30)), 1)
		require.Len(t, find(lines, v.fn("MallocFromPoolAsync")+" n=1048576"), 1, "reserve allocates once")
		require.Len(t, find(lines, v.fn("FreeAsync")), 1, "and frees it")
	})
}

func TestFakeMarshalling(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		s := newStream(t, d)
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
		require.Len(t, find(lines, v.fn("HostAlloc")), 0)
		require.Len(t, find(lines, v.fn("MemcpyAsync"), fmt.Sprintf("dst=%#x", uint64(p)), "src="+hp, "n=32 kind=1", "stream="+sp), 1, "%v", lines)
		require.Len(t, find(lines, v.fn("MemcpyAsync"), fmt.Sprintf("dst=%#x src=%#x n=32 kind=3", uint64(q), uint64(p))), 1, "%v", lines)
		require.Len(t, find(lines, v.fn("MemsetAsync"), fmt.Sprintf("dst=%#x value=90 n=32", uint64(q+32))), 1, "%v", lines)
		require.Len(t, find(lines, v.fn("MemcpyAsync"), "dst="+hp, fmt.Sprintf("src=%#x n=64 kind=2", uint64(q))), 1, "%v", lines)

		// Pageable memory: refused for the async copies before the runtime, accepted
		// by the blocking ones, which synchronize.
		page := make([]byte, 16)
		require.ErrorIs(t, d.CopyHtoDAsync(p, page, s), alloc.ErrInvalidValue)
		require.ErrorIs(t, d.CopyDtoHAsync(page, p, s), alloc.ErrInvalidValue)
		require.ErrorIs(t, d.CopyHtoDAsync(p, unsafe.Slice(&host[60], 8), s), alloc.ErrInvalidValue, "a span running past the pinned buffer")
		require.Empty(t, find(log.Lines(), v.fn("MemcpyAsync")))
		require.NoError(t, d.CopyHtoD(p, []byte("pageable bytes!!"), s))
		require.NoError(t, d.CopyDtoH(page, p, s))
		require.Equal(t, "pageable bytes!!", string(page))
		lines = log.Lines()
		require.Len(t, find(lines, v.fn("StreamSynchronize")), 2, "%v", lines)

		require.NoError(t, d.FreeAsync(p, s))
		require.NoError(t, d.FreeAsync(q, s))
		require.NoError(t, d.HostFree(host))
		require.ErrorIs(t, d.HostFree(host), alloc.ErrInvalidValue)
		lines = log.Lines()
		require.Len(t, find(lines, v.fn("HostFree")+" "+hp), 1, "%v", lines)
	})
}

func TestFakeHostAllocIsPortable(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		b, err := d.HostAlloc(4096)
		require.NoError(t, err)
		require.Len(t, b, 4096)
		require.Len(t, find(log.Lines(), v.fn("HostAlloc")+" n=4096 flags=1"), 1)
		require.NoError(t, d.HostFree(b))
	})
}

func TestFakeGraphInstantiateFlags(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		s := newStream(t, d)
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
			require.Len(t, find(lines, v.fn("GraphInstantiateWithFlags"), want), 1, "%v", lines)
			require.Len(t, find(lines, v.fn("StreamBeginCapture"), "mode=2"), 1, "%v", lines)
			require.NoError(t, d.GraphLaunch(e, s))
			require.NoError(t, d.GraphExecDestroy(e))
			require.NoError(t, d.GraphDestroy(g))
			require.NoError(t, d.FreeAsync(p, s))
		}
	})
}

// Global and ThreadLocal captures must end on the thread that began them
// (the fake returns 908 otherwise, as CUDA does and HIP declares). The goroutines here hop
// threads freely; the driver's capture thread makes it work every time.
func TestFakeCaptureEndsOnTheBeginningThread(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
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
	})
}

// A ThreadLocal capture forbids unsafe calls on its own thread only: a
// synchronous allocation from elsewhere must neither fail nor invalidate
// it. A Global capture forbids them everywhere, and the runtime's refusal (900)
// arrives as driver.ErrCaptureIllegalOp, after which the capture ends
// invalidated (901).
func TestFakeUnsafeCallsDuringCapture(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		s := newStream(t, d)

		require.NoError(t, d.BeginCapture(s, alloc.ThreadLocal))
		p, err := d.Malloc(1024)
		require.NoError(t, err, "the synchronous malloc runs on the dev thread, not the capturing one")
		require.NoError(t, d.Free(p))
		gpurttest.EndActiveCapture(t, d, s)

		require.NoError(t, d.BeginCapture(s, alloc.Global))
		_, err = d.Malloc(1024)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.Contains(t, err.Error(), v.failed(v.fn("Malloc"), 900))
		st, err := d.StreamCaptureStatus(s)
		require.NoError(t, err)
		require.Equal(t, driver.CaptureInvalidated, st)
		_, err = d.EndCapture(s)
		require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.Contains(t, err.Error(), "901")
		st, err = d.StreamCaptureStatus(s)
		require.NoError(t, err)
		require.Equal(t, driver.CaptureNone, st)
	})
}

// With device 1, every call that depends on the current device runs with
// device 1 current, whatever thread the calling goroutine is on.
func TestFakeDeviceIsCurrentForDeviceCalls(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"DEVICES", "2")
		d, log := openFake(t, v, opts{Device: 1})
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := newStream(t, d)
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
		for _, fn := range []string{v.fn("MemPoolCreate"), v.fn("MemGetInfo"), v.fn("StreamCreateWithPriority"), v.fn("Malloc") + " ", v.fn("Free") + " ", v.fn("HostAlloc"), v.fn("HostFree")} {
			calls := find(lines, fn)
			require.NotEmpty(t, calls, fn)
			require.Equal(t, calls, find(calls, "dev=1 "), "%s must run with device 1 current", fn)
		}
		require.Len(t, find(lines, "locationId=1"), 1)
	})
}

func TestFakeDeviceMissingIsUnavailable(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		fakeLib(t, v)
		_, err := v.open(opts{Device: 3})
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), "device 3 requested, 1 present")
	})
}

func TestFakeQueryAndClosed(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		s := newStream(t, d)
		done, err := d.StreamQuery(s)
		require.NoError(t, err)
		require.True(t, done)
		v.fail(t, v.fn("StreamQuery")+":600")
		done, err = d.StreamQuery(s)
		require.NoError(t, err, "not ready is an answer, not an error")
		require.False(t, done)
		v.fail(t, "")
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
	})
}

// Runtime error codes reach callers as typed errors with the code and the
// runtime's text (the vendor's message format).
func TestFakeErrorsKeepCodeAndText(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		s := newStream(t, d)
		for _, c := range []struct {
			fn   string
			code int
			want error
			text map[string]string
			do   func() error
		}{
			{"MallocFromPoolAsync", 2, alloc.ErrOutOfMemory, map[string]string{
				"cuda": "out of memory", "hip": "out of memory (hipErrorOutOfMemory, 2)"},
				func() error { _, err := d.MallocAsync(64, s); return err }},
			{"StreamSynchronize", 900, driver.ErrCaptureIllegalOp, map[string]string{
				"cuda": "operation not permitted when stream is capturing", "hip": "stream capture unsupported (hipErrorStreamCaptureUnsupported, 900)"},
				func() error { return d.StreamSynchronize(s) }},
			{"MemsetAsync", 1, alloc.ErrInvalidValue, map[string]string{
				"cuda": "invalid argument", "hip": "invalid value (hipErrorInvalidValue, 1)"},
				func() error { return d.MemsetAsync(1, 0, 1, s) }},
			{"StreamBeginCapture", 801, driver.ErrCaptureUnavailable, map[string]string{
				"cuda": "fake: unknown error", "hip": "not supported (hipErrorNotSupported, 801)"},
				func() error { return d.BeginCapture(s, alloc.Global) }},
			{"GraphLaunch", 719, driver.ErrDriver, map[string]string{
				"cuda": "fake: unknown error", "hip": `launch failure (hipErrorLaunchFailure, 719) "hipErrorUnknown"`},
				func() error { return d.GraphLaunch(1, s) }},
		} {
			spec := fmt.Sprintf("%s:%d", v.fn(c.fn), c.code)
			v.fail(t, spec)
			err := c.do()
			require.ErrorIs(t, err, c.want, spec)
			require.Contains(t, err.Error(), v.says(v.fn(c.fn), fmt.Sprint(c.code), c.text[v.name]))
			code, ok := v.code(err)
			require.True(t, ok, "errors.As finds the vendor's error: %v", err)
			require.Equal(t, c.code, code)
		}
	})
}
