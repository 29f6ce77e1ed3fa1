package cuda

import (
	"fmt"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// The fake models the legacy-stream rule measured on an H100 (driver 580,
// runtime 13.0, cmd/cudatruth): while a blocking stream captures, in any
// mode, work on the legacy stream (another library's cudaMemcpy, say) is
// refused with 906 and invalidates the capture. These tests show that the
// default (non-blocking streams) keeps the capture out of the legacy
// stream's way, that Blocking reproduces the failure, and that a second
// allocator's pool growth is legal during a Global capture (cudatruth: it
// is, in Relaxed interaction mode, which the driver uses).

// twoAllocators opens a driver over the fake with opts and two allocators
// on it, each with its own stream.
func twoAllocators(t *testing.T, opts Options) (a, b *alloc.Allocator, log *fakeLog) {
	t.Helper()
	d, log := openFake(t, opts)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	b, err = alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close(); a.Close() })
	return a, b, log
}

func TestFakeDefaultStreamsAreNonBlocking(t *testing.T) {
	a, b, log := twoAllocators(t, Options{})
	lines := find(log.lines(), "cudaStreamCreateWithPriority")
	require.Len(t, lines, 2, "%v", lines)
	require.Len(t, find(lines, "flags=1"), 2, "the zero Options create cudaStreamNonBlocking streams: %v", lines)

	require.NoError(t, a.BeginCapture(alloc.Global))
	buf, err := b.Alloc(4096) // a pool miss: a 2 MiB segment from cudaMallocFromPoolAsync on B's idle stream
	require.NoError(t, err, "B's pool allocation on its own non-blocking stream is legal during A's Global capture")
	require.Len(t, find(log.lines(), "cudaMallocFromPoolAsync n=2097152 "), 1, "the miss makes one 2 MiB segment")
	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateActive, st)
	g, err := a.EndCapture()
	require.NoError(t, err, "A's capture survived B's allocation")
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(buf))
}

func TestFakeBlockingStreamsOption(t *testing.T) {
	a, b, log := twoAllocators(t, Options{Blocking: true})
	require.Len(t, find(log.lines(), "cudaStreamCreateWithPriority flags=0"), 2, "non_blocking=false asks for blocking streams")
	require.NoError(t, a.BeginCapture(alloc.Global))
	buf, err := b.Alloc(4096)
	require.NoError(t, err, "another stream's pool growth does not touch the legacy stream")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(buf))
}

// legacyMemset enqueues a memset on the legacy default stream (handle 0),
// as another library in the process would.
func legacyMemset(t *testing.T, path string, p alloc.DevicePtr, n int64) int32 {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	fn, err := purego.Dlsym(h, "cudaMemsetAsync")
	require.NoError(t, err)
	r, _, _ := purego.SyscallN(fn, uintptr(p), 0, uintptr(n), 0)
	return int32(r)
}

func TestFakeLegacyStreamDuringCapture(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		for _, mode := range alloc.Modes {
			name := fmt.Sprintf("blocking=%v/%s", blocking, mode)
			t.Run(name, func(t *testing.T) {
				path := fakeLib(t)
				d, err := New(Options{Blocking: blocking})
				require.NoError(t, err)
				t.Cleanup(func() { d.Close() })
				a, err := alloc.New(d, alloc.Options{})
				require.NoError(t, err)
				defer a.Close()
				scratch, err := a.Alloc(256)
				require.NoError(t, err)
				require.NoError(t, a.BeginCapture(mode))
				code := legacyMemset(t, path, scratch.Ptr(), 256)
				st, err := a.CaptureStatus()
				require.NoError(t, err)
				if blocking {
					require.Equal(t, int32(errStreamCaptureImplicit), code, "work on the legacy stream depends on a capturing blocking stream")
					require.Equal(t, alloc.StateInvalidated, st)
					_, err = a.EndCapture()
					require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
				} else {
					require.Zero(t, code, "a non-blocking stream's capture does not involve the legacy stream")
					require.Equal(t, alloc.StateActive, st)
					g, err := a.EndCapture()
					require.NoError(t, err)
					require.NoError(t, g.Close())
				}
				require.NoError(t, a.Free(scratch))
			})
		}
	}
}
