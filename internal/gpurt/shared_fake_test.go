package gpurt_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// capturingAllocator opens a driver over the fake at path and starts a Global-mode
// capture on an allocator of it; the log is cleared after.
func capturingAllocator(t *testing.T, v *vendorCase, path string) (*alloc.Allocator, *fakeLog) {
	t.Helper()
	log := openFakeLog(t, path)
	d, err := v.open(opts{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	require.NoError(t, a.BeginCapture(alloc.Global))
	log.Lines()
	return a, log
}

// Opening a device during another allocator's Global capture is refused
// before any driver call, with a typed error; the capture stays valid and
// the open succeeds after it.
func TestFakeOpenDuringGlobalCaptureIsRefused(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		a, log := capturingAllocator(t, v, fakeLib(t, v))

		_, err := v.open(opts{})
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.Contains(t, err.Error(), "open device")
		require.Contains(t, err.Error(), "global-mode capture")
		_, err = backends.OpenString(t.Context(), v.name+";cpu")
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "the chain stops: falling back to cpu because of a capture would surprise")
		require.Empty(t, log.Lines(), "no driver call while the capture is active")

		endCapture(t, a, "the capture survived")
		d, err := v.open(opts{})
		require.NoError(t, err, "a retry after the capture opens")
		require.NoError(t, d.Close())
	})
}

// Closing a driver during another allocator's Global capture marks it
// closed at once and defers the vendor teardown until the capture ends.
func TestFakeCloseDuringGlobalCaptureIsDeferred(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		path := fakeLib(t, v)
		other, err := v.open(opts{}) // opened before the capture
		require.NoError(t, err)
		_, err = other.CreateStream()
		require.NoError(t, err)
		_, err = other.HostAlloc(4096)
		require.NoError(t, err)

		a, log := capturingAllocator(t, v, path) // the same library: one log
		require.NoError(t, other.Close(), "close is not refused")
		require.ErrorIs(t, other.Close(), alloc.ErrClosed)
		_, err = other.Malloc(64)
		require.ErrorIs(t, err, alloc.ErrClosed, "closed at once")
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, other.WaitClosed(ctx), context.DeadlineExceeded, "teardown waits for the capture")
		require.Empty(t, log.Lines(), "no driver call while the capture is active")

		g, err := a.EndCapture()
		require.NoError(t, err, "the capture survived")
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		require.NoError(t, other.WaitClosed(ctx))
		lines := log.Lines()
		for _, fn := range []string{v.fn("HostFree"), v.fn("StreamDestroy"), v.fn("MemPoolDestroy")} {
			require.Len(t, find(lines, fn), 1, "%s after the capture: %v", fn, lines)
		}
		require.NoError(t, g.Close())
	})
}

// Without a Global capture, Close tears down at once and reports the
// teardown's result; ThreadLocal and Relaxed captures do not defer it.
func TestFakeCloseOutsideGlobalCaptureIsImmediate(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		path := fakeLib(t, v)
		log := openFakeLog(t, path)
		d, err := v.open(opts{})
		require.NoError(t, err)
		a := alloctest.New(t, d, alloc.Options{})
		require.NoError(t, a.BeginCapture(alloc.ThreadLocal))
		other, err := v.open(opts{})
		require.NoError(t, err, "a ThreadLocal capture does not forbid opening on the driver's own thread")
		log.Lines()
		require.NoError(t, other.Close())
		require.Len(t, find(log.Lines(), v.fn("MemPoolDestroy")), 1, "torn down before Close returned")
		require.NoError(t, other.WaitClosed(t.Context()))
		endCapture(t, a)
		require.NoError(t, d.Close())
	})
}

// CUDA's 900 does not always invalidate the capture. After a refusal alloc
// reads the stream's status again: here the driver refuses one allocation
// (injected 900, capture left alone), and alloc reports the operation
// refused, the capture still valid, and EndCapture succeeds.
func TestFake900LeavesCaptureActive(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		require.NoError(t, a.BeginCapture(alloc.Global))

		v.fail(t, v.fn("MallocFromPoolAsync")+":900")
		_, err := a.Alloc(4096)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.Contains(t, err.Error(), v.failed(v.fn("MallocFromPoolAsync"), 900))
		require.Contains(t, err.Error(), "the capture is still active")
		v.fail(t, "")

		st, err := a.CaptureStatus()
		require.NoError(t, err)
		require.Equal(t, alloc.StateActive, st)
		buf, err := a.Alloc(4096)
		require.NoError(t, err, "the capture goes on")
		require.NoError(t, a.Free(buf))
		endCapture(t, a)
	})
}

// When the refusal did invalidate the capture, the error says so too: it
// wraps ErrCaptureInvalidated as well, and EndCapture reports the loss.
func TestFake900ThatInvalidatesSaysSo(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		buf, err := a.Alloc(256)
		require.NoError(t, err)
		require.NoError(t, a.BeginCapture(alloc.Global))
		v.fail(t, v.fn("MemsetAsync")+":900")
		t.Setenv(v.envPrefix+"FAIL_INVALIDATES", "1")
		err = a.Memset(buf, 0, 1, 256)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.Contains(t, err.Error(), "invalidated by the refusal")
		v.fail(t, "")
		st, err := a.CaptureStatus()
		require.NoError(t, err)
		require.Equal(t, alloc.StateInvalidated, st)
		_, err = a.EndCapture()
		require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.NoError(t, a.Free(buf))
	})
}

// 908 (a Global capture ended on another thread) is not an invalidation:
// the capture still records and ends on its own thread.
func TestFake908IsWrongThreadNotInvalidated(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, _ := openFake(t, v, opts{})
		s := newStream(t, d)
		require.NoError(t, d.BeginCapture(s, alloc.Global))
		v.fail(t, v.fn("StreamEndCapture")+":908")
		_, err := d.EndCapture(s)
		require.ErrorIs(t, err, driver.ErrCaptureWrongThread)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.Contains(t, err.Error(), "capture must be ended on the thread that began it")
		v.fail(t, "")
		gpurttest.EndActiveCapture(t, d, s)
	})
}

// mmapHost is a backends.HostMemory of anonymous mappings (outside the Go
// heap, like the plugin server's memfd regions) that counts what it holds.
type mmapHost struct {
	mu   sync.Mutex
	live map[*byte]int
}

func (h *mmapHost) Alloc(size int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil {
		h.live = map[*byte]int{}
	}
	h.live[&b[0]] = len(b)
	return b, nil
}

func (h *mmapHost) Free(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live[&b[0]] != len(b) {
		return errors.New("mmapHost: not ours")
	}
	delete(h.live, &b[0])
	return syscall.Munmap(b)
}

func (h *mmapHost) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

func TestFakeSuppliedHostMemoryIsRegistered(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		hm := &mmapHost{}
		d, log := openFake(t, v, opts{HostMemory: hm})
		log.Lines()
		b, err := d.HostAlloc(8192)
		require.NoError(t, err)
		require.Equal(t, 1, hm.held(), "the memory is the source's")
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("HostRegister"), "n=8192 flags=1"), 1, "pinned with the portable flag: %v", lines)
		require.Empty(t, find(lines, v.fn("HostAlloc")))
		require.True(t, gpurt.Pinned(d, b), "async copies accept it")

		s := newStream(t, d)
		p, err := d.MallocAsync(8192, s)
		require.NoError(t, err)
		for i := range b {
			b[i] = byte(i)
		}
		require.NoError(t, d.CopyHtoDAsync(p, b, s))
		out, err := d.HostAlloc(8192)
		require.NoError(t, err)
		require.NoError(t, d.CopyDtoHAsync(out, p, s))
		require.NoError(t, d.StreamSynchronize(s))
		require.Equal(t, b, out)

		require.NoError(t, d.HostFree(b))
		require.Len(t, find(log.Lines(), v.fn("HostUnregister")), 1)
		require.Equal(t, 1, hm.held(), "given back to the source")
		require.ErrorIs(t, d.HostFree(b), alloc.ErrInvalidValue, "a second free is refused")
		require.NoError(t, d.FreeAsync(p, s))
		require.NoError(t, d.DestroyStream(s))

		// Close gives back what is still held.
		require.NoError(t, d.Close())
		require.NoError(t, d.WaitClosed(t.Context()))
		require.Zero(t, hm.held())
	})
}

func TestFakeSuppliedHostMemoryGivenBackOnRegisterFailure(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		hm := &mmapHost{}
		d, _ := openFake(t, v, opts{HostMemory: hm})
		v.fail(t, v.fn("HostRegister")+":2")
		_, err := d.HostAlloc(4096)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.Contains(t, err.Error(), v.failed(v.fn("HostRegister"), 2))
		require.Zero(t, hm.held(), "nothing kept after a failed registration")
		require.Zero(t, gpurt.HostBuffers(d))
	})
}

// The fake models the legacy-stream rule measured on an H100 (driver 580,
// runtime 13.0, cmd/cudatruth): while a blocking stream captures, in any
// mode, work on the legacy stream (another library's cudaMemcpy or hipMemcpy, say) is
// refused with 906 and invalidates the capture. These tests show that the
// default (non-blocking streams) keeps the capture out of the legacy
// stream's way, that Blocking reproduces the failure, and that a second
// allocator's pool growth is legal during a Global capture (cudatruth: it
// is, in Relaxed interaction mode, which the driver uses).

// twoAllocators opens a driver over the fake with opts and two allocators
// on it, each with its own stream.
func twoAllocators(t *testing.T, v *vendorCase, o opts) (a, b *alloc.Allocator, log *fakeLog) {
	t.Helper()
	d, log := openFake(t, v, o)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	b, err = alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close(); a.Close() })
	return a, b, log
}

func TestFakeDefaultStreamsAreNonBlocking(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		a, b, log := twoAllocators(t, v, opts{})
		lines := find(log.Lines(), v.fn("StreamCreateWithPriority"))
		require.Len(t, lines, 2, "%v", lines)
		require.Len(t, find(lines, "flags=1"), 2, "the zero Options create non-blocking streams: %v", lines)

		require.NoError(t, a.BeginCapture(alloc.Global))
		buf, err := b.Alloc(4096) // a pool miss: a 2 MiB segment from the pool alloc on B's idle stream
		require.NoError(t, err, "B's pool allocation on its own non-blocking stream is legal during A's Global capture")
		require.Len(t, find(log.Lines(), v.fn("MallocFromPoolAsync")+" n=2097152 "), 1, "the miss makes one 2 MiB segment")
		st, err := a.CaptureStatus()
		require.NoError(t, err)
		require.Equal(t, alloc.StateActive, st)
		endCapture(t, a, "A's capture survived B's allocation")
		require.NoError(t, b.Free(buf))
	})
}

func TestFakeBlockingStreamsOption(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		a, b, log := twoAllocators(t, v, opts{Blocking: true})
		require.Len(t, find(log.Lines(), v.fn("StreamCreateWithPriority")+" flags=0"), 2, "non_blocking=false asks for blocking streams")
		require.NoError(t, a.BeginCapture(alloc.Global))
		buf, err := b.Alloc(4096)
		require.NoError(t, err, "another stream's pool growth does not touch the legacy stream")
		endCapture(t, a)
		require.NoError(t, b.Free(buf))
	})
}

// legacyMemset enqueues a memset on the legacy default stream (handle 0),
// as another library in the process would.
func legacyMemset(t *testing.T, v *vendorCase, path string, p driver.DevicePtr, n int64) int32 {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(h, v.fn("MemsetAsync"))
	require.NoError(t, err)
	r, _, _ := purego.SyscallN(fn, uintptr(p), 0, uintptr(n), 0)
	return int32(r)
}

func TestFakeLegacyStreamDuringCapture(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		for _, blocking := range []bool{false, true} {
			for _, mode := range driver.Modes() {
				name := fmt.Sprintf("blocking=%v/%s", blocking, mode)
				t.Run(name, func(t *testing.T) {
					path := fakeLib(t, v)
					d, err := v.open(opts{Blocking: blocking})
					require.NoError(t, err)
					t.Cleanup(func() { d.Close() })
					a := alloctest.New(t, d, alloc.Options{})
					scratch, err := a.Alloc(256)
					require.NoError(t, err)
					require.NoError(t, a.BeginCapture(mode))
					code := legacyMemset(t, v, path, scratch.Ptr(), 256)
					st, err := a.CaptureStatus()
					require.NoError(t, err)
					if blocking {
						require.Equal(t, int32(906), code, "work on the legacy stream depends on a capturing blocking stream")
						require.Equal(t, alloc.StateInvalidated, st)
						_, err = a.EndCapture()
						require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
					} else {
						require.Zero(t, code, "a non-blocking stream's capture does not involve the legacy stream")
						require.Equal(t, alloc.StateActive, st)
						endCapture(t, a)
					}
					require.NoError(t, a.Free(scratch))
				})
			}
		}
	})
}

// ipc=true creates the pool with the POSIX file descriptor handle type, and
// ExportPool then gives a file descriptor; without it ExportPool refuses.
func TestFakeExportPool(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{IPC: true})
		require.Len(t, find(log.Lines(), v.fn("MemPoolCreate")+" allocType=1 handleTypes=1 locationType=1"), 1)
		fd, err := d.ExportPool()
		require.NoError(t, err)
		require.GreaterOrEqual(t, fd, 0)
		var st syscall.Stat_t
		require.NoError(t, syscall.Fstat(fd, &st), "a real descriptor")
		require.NoError(t, syscall.Close(fd))
		require.Len(t, find(log.Lines(), v.fn("MemPoolExportToShareableHandle"), "type=1 flags=0"), 1)

		d, _ = openFake(t, v, opts{})
		_, err = d.ExportPool()
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Contains(t, err.Error(), "ipc=true")
	})
}

// poolChildEnv carries the export data to the child of
// TestFakePoolAcrossProcesses; the pool's descriptor is its fd 3.
const poolChildEnv = "CAPALLOC_TEST_GPURT_POOL_PTR"

// A pool allocation crosses processes the way CUDA documents it (and
// HIP's header repeats): the
// exporter's pool descriptor (inherited as fd 3) is imported, then the
// allocation's 64 bytes of export data; the child reads what the parent
// wrote, writes back, frees its import and closes the pool.
func TestFakePoolAcrossProcesses(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		if asChild(t, v, poolChildEnv, poolChild) {
			return
		}
		d, log := openFake(t, v, opts{IPC: true})
		s := newStream(t, d)
		p, err := d.MallocAsync(2048, s)
		require.NoError(t, err)
		fill(t, d, p, bytes.Repeat([]byte{0xA5}, 2048))
		fd, err := d.ExportPool()
		require.NoError(t, err)
		// One owner for the descriptor: an *os.File left to the collector
		// would close the number again later, when another test may hold it.
		pool := os.NewFile(uintptr(fd), "pool")
		defer pool.Close()
		data, err := d.ExportPointer(p)
		require.NoError(t, err)
		require.Len(t, data, 64)
		require.Len(t, find(log.Lines(), v.fn("MemPoolExportPointer")), 1)

		runChild(t, v, "TestFakePoolAcrossProcesses", poolChildEnv, hex.EncodeToString(data), pool)
		require.Equal(t, bytes.Repeat([]byte{0x5A}, 2048), read(t, d, p, 2048), "the child's write is here")
		require.NoError(t, d.FreeAsync(p, s))
	})
}

func poolChild(t *testing.T, v *vendorCase, hx string) {
	data, err := hex.DecodeString(hx)
	require.NoError(t, err)
	d, err := v.open(opts{})
	require.NoError(t, err)
	defer d.Close()
	ip, err := d.ImportPool(3)
	require.NoError(t, err)
	q, err := ip.ImportPointer(data)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{0xA5}, 2048), read(t, d, q, 2048))
	fill(t, d, q, bytes.Repeat([]byte{0x5A}, 2048))
	require.NoError(t, ip.FreePointer(q))
	require.NoError(t, ip.Close())
	require.ErrorIs(t, ip.Close(), alloc.ErrClosed)
	_, err = ip.ImportPointer(data)
	require.ErrorIs(t, err, alloc.ErrClosed)
}

// What cannot be exported or imported is refused: a pointer from a pool
// that is not exportable or from Malloc, short export data (before any
// call), a negative descriptor (before any call), and one that is not
// open; an imported pool makes no allocations of its own.
func TestFakePoolSharingRefusals(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		s := newStream(t, d)
		p, err := d.MallocAsync(64, s)
		require.NoError(t, err)
		_, err = d.ExportPointer(p)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "the pool is not exportable")
		m, err := d.Malloc(64)
		require.NoError(t, err)
		_, err = d.ExportPointer(m)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "not a pool allocation")
		_, err = d.ExportPointer(0)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)

		log.Lines()
		_, err = d.ImportPool(-1)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Empty(t, find(log.Lines(), v.fn("MemPoolImportFromShareableHandle")), "refused before the runtime")
		_, err = d.ImportPool(1 << 20)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "not an open descriptor")

		r, w, err := os.Pipe()
		require.NoError(t, err)
		defer r.Close()
		defer w.Close()
		ip, err := d.ImportPool(int(r.Fd()))
		require.NoError(t, err)
		require.Len(t, find(log.Lines(), v.fn("MemPoolImportFromShareableHandle"), "fd="+strconv.Itoa(int(r.Fd()))+" type=1 flags=0"), 1,
			"the descriptor by value, cast to a pointer")
		_, err = ip.ImportPointer(make([]byte, 10))
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Empty(t, find(log.Lines(), v.fn("MemPoolImportPointer")), "refused before the runtime")
		_, err = ip.ImportPointer(make([]byte, 64))
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "not export data")
		require.NoError(t, ip.Close())
	})
}
