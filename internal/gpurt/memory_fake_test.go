package gpurt_test

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/internal/allocipc"
)

// A handle of a synchronous allocation, opened again, maps the same bytes
// at another address (the fake allows opening in the exporting process;
// the real runtime's behavior there is not modelled). The open passes the
// lazy-peer-access flag as 1 (CUDA; HIP from 6.0, and the fake is 6.1).
func TestFakeIPCHandleRoundTrip(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		var _ driver.IPCMemory = d
		p, err := d.Malloc(4096)
		require.NoError(t, err)
		fill(t, d, p, bytes.Repeat([]byte{0x5A}, 4096))
		h, err := d.IPCGetMemHandle(p)
		require.NoError(t, err)
		require.Len(t, h, 64)
		require.Equal(t, "FAKEIPC\x00", string(h[:8]), "the fake's handle came back through the out-parameter")
		q, err := d.IPCOpenMemHandle(h)
		require.NoError(t, err)
		require.NotEqual(t, p, q)
		require.Len(t, find(log.Lines(), v.fn("IpcOpenMemHandle"), "size=4096 flags=1"), 1, "by value: the handle's fields reached C intact")
		require.Equal(t, bytes.Repeat([]byte{0x5A}, 4096), read(t, d, q, 4096))
		fill(t, d, q, bytes.Repeat([]byte{0x33}, 4096))
		require.Equal(t, bytes.Repeat([]byte{0x33}, 4096), read(t, d, p, 4096), "one memory, two mappings")
		require.NoError(t, d.IPCCloseMemHandle(q))
		require.ErrorIs(t, d.IPCCloseMemHandle(q), alloc.ErrInvalidValue, "closed twice: an invalid handle (400)")
		require.NoError(t, d.Free(p))
	})
}

// Only synchronous allocations export (cudaIpcGetMemHandle: "previously
// allocated with cudaMalloc"; HIP's header: "created with hipMalloc"); bad
// handles are refused, short ones before any call.
func TestFakeIPCRefusals(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		s := newStream(t, d)
		p, err := d.MallocAsync(4096, s)
		require.NoError(t, err)
		_, err = d.IPCGetMemHandle(p)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "a pool allocation")
		require.Contains(t, err.Error(), v.says(v.fn("IpcGetMemHandle"), "1", map[string]string{
			"cuda": "invalid argument", "hip": "invalid value (hipErrorInvalidValue, 1)"}[v.name]))
		_, err = d.IPCGetMemHandle(0)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)

		log.Lines()
		_, err = d.IPCOpenMemHandle(make([]byte, 63))
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Empty(t, find(log.Lines(), v.fn("IpcOpenMemHandle")), "refused before the runtime")
		_, err = d.IPCOpenMemHandle(make([]byte, 64))
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.Contains(t, err.Error(), map[string]string{
			"cuda": "returned 400 (invalid resource handle)", "hip": "(hipErrorInvalidHandle, 400)"}[v.name])
	})
}

// ipcChildEnv carries the handle to the child of TestFakeIPCAcrossProcesses.
const ipcChildEnv = "CAPALLOC_TEST_GPURT_IPC_HANDLE"

// Another process opens the handle, reads what this one wrote and writes
// back: the fake maps the exporter's memory through /proc/PID/fd, so the
// handle's bytes are all the child gets.
func TestFakeIPCAcrossProcesses(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		if asChild(t, v, ipcChildEnv, ipcChild) {
			return
		}
		d, _ := openFake(t, v, opts{})
		p, err := d.Malloc(1024)
		require.NoError(t, err)
		fill(t, d, p, bytes.Repeat([]byte("parent"), 1024/6+1)[:1024])
		h, err := d.IPCGetMemHandle(p)
		require.NoError(t, err)
		runChild(t, v, "TestFakeIPCAcrossProcesses", ipcChildEnv, hex.EncodeToString(h))
		require.Equal(t, bytes.Repeat([]byte("child!"), 1024/6+1)[:1024], read(t, d, p, 1024), "the child's write is here")
	})
}

func ipcChild(t *testing.T, v *vendorCase, hx string) {
	h, err := hex.DecodeString(hx)
	require.NoError(t, err)
	d, err := v.open(opts{})
	require.NoError(t, err)
	defer d.Close()
	q, err := d.IPCOpenMemHandle(h)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte("parent"), 1024/6+1)[:1024], read(t, d, q, 1024))
	fill(t, d, q, bytes.Repeat([]byte("child!"), 1024/6+1)[:1024])
	require.NoError(t, d.IPCCloseMemHandle(q))
}

// Through the Allocator (internal/allocipc, as symheap makes them) the IPC
// calls are guarded like AllocSync: refused during a Global capture with
// no runtime call, allowed after it.
func TestFakeIPCThroughAllocatorIsGuarded(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		b, err := a.AllocSync(4096)
		require.NoError(t, err)
		h, err := allocipc.Export(a, b)
		require.NoError(t, err)

		require.NoError(t, a.BeginCapture(alloc.Global))
		log.Lines()
		_, err = allocipc.Export(a, b)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		_, err = allocipc.Open(a, h)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.ErrorIs(t, allocipc.Close(a, 1), driver.ErrCaptureIllegalOp)
		require.Empty(t, find(log.Lines(), v.prefix+"Ipc"), "no runtime call during the capture")
		endCapture(t, a, "the capture survived")

		q, err := allocipc.Open(a, h)
		require.NoError(t, err)
		require.NoError(t, allocipc.Close(a, q))
		require.NoError(t, a.Free(b))
		_, err = allocipc.Export(a, b)
		require.ErrorIs(t, err, alloc.ErrInvalidBuffer, "a freed buffer")
	})
}

// A backend without IPC says so.
func TestIPCOnBackendWithoutIt(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	a := alloctest.New(t, d, alloc.Options{})
	b, err := a.AllocSync(64)
	require.NoError(t, err)
	_, err = allocipc.Export(a, b)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "no IPC memory handles")
	require.NoError(t, a.Free(b), "the refused export left the buffer the caller's")
}

// graphMemory captures an allocation the graph also frees, then closes the
// graph: its memory stays cached for graphs until the device graph-memory trim.
func graphMemory(t *testing.T, a *alloc.Allocator, n int64) {
	t.Helper()
	require.NoError(t, a.BeginCapture(alloc.Global))
	b, err := a.Alloc(n)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
	endCapture(t, a)
}

func TestFakeTrimTrimsGraphMemory(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		graphMemory(t, a, 1<<20)
		log.Lines()
		require.NoError(t, a.Trim())
		require.Len(t, find(log.Lines(), v.fn("DeviceGraphMemTrim")+" device=0 cached=1048576"), 1)

		// Device-wide: not during another allocator's Global capture. The pool
		// cache is released, the graph trim skipped, the capture left valid.
		b, err := alloc.New(d, alloc.Options{})
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.BeginCapture(alloc.Global))
		require.NoError(t, a.Trim())
		require.Empty(t, find(log.Lines(), v.fn("DeviceGraphMemTrim")))
		endCapture(t, b)
	})
}

// Under memory pressure an allocation that ran out of memory is retried
// after the graph memory of closed graphs is trimmed.
func TestFakeOutOfMemoryTrimsGraphMemory(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"MEM", "4194304")
		d, log := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		graphMemory(t, a, 3<<20)
		log.Lines()
		b, err := a.Alloc(2 << 20)
		require.NoError(t, err, "the retry after the trim succeeds")
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("MallocFromPoolAsync")+" n=20971520 "), 1, "the usual 20 MiB segment failed: %v", lines)
		require.Len(t, find(lines, v.fn("MallocFromPoolAsync")+" n=2097152 "), 2, "then just the request failed once, and was retried: %v", lines)
		require.Len(t, find(lines, v.fn("DeviceGraphMemTrim")), 1, "%v", lines)
		require.NoError(t, a.Free(b))
	})
}

// Without the optional symbol the library still opens, a warning says
// graph memory is not trimmed, Trim does nothing more, and the allocation
// above runs out of memory.
func TestFakeGraphMemTrimAbsent(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"MEM", "4194304")
		path := fakeLib(t, v, "-DFAKE_NO_GRAPH_MEM_TRIM")
		log := openFakeLog(t, path)
		d, err := v.open(opts{})
		require.NoError(t, err)
		defer d.Close()
		require.Contains(t, strings.Join(d.Warnings(), "\n"), "lacks "+v.fn("DeviceGraphMemTrim"))
		require.NoError(t, d.TrimGraphMemory(), "nothing to call")
		a := alloctest.New(t, d, alloc.Options{})
		graphMemory(t, a, 3<<20)
		require.NoError(t, a.Trim())
		_, err = a.Alloc(2 << 20)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.Empty(t, find(log.Lines(), v.fn("DeviceGraphMemTrim")))
	})
}

// TrimPool is the pool trim to 0 on the driver's pool, on the device
// thread.
func TestFakeTrimPool(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{Device: 0})
		log.Lines()
		require.NoError(t, d.TrimPool())
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("MemPoolTrimTo"), "keep=0"), 1, "%v", lines)
		require.NoError(t, d.Close())
		require.ErrorIs(t, d.TrimPool(), alloc.ErrClosed)
	})
}

// The memory-info call failing at open is not fatal: the total comes from
// the vendor's other source and a warning says so.
func TestFakeMemGetInfoFailureFallsBack(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		v.fail(t, v.fn("MemGetInfo")+":999")
		t.Setenv(v.envPrefix+v.totalMemEnv, "3221225472")
		d, _ := openFake(t, v, opts{})
		require.Equal(t, int64(3<<30), d.Info().TotalMemory)
		w := strings.Join(d.Warnings(), "\n")
		require.Contains(t, w, "total memory from "+v.totalMemFrom)
		require.Contains(t, w, v.failed(v.fn("MemGetInfo"), 999))
	})
}

// On a unified-memory device an under-reporting memory-info call is
// overridden by the other source; on a discrete one it stands, with no
// warning (but hip's about the pools attribute, which its fake reports 0).
func TestFakeMemGetInfoUnderReport(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"MEMINFO_TOTAL", "268435456")
		t.Setenv(v.envPrefix+"INTEGRATED", "1")
		d, _ := openFake(t, v, opts{})
		require.True(t, d.Info().UnifiedMemory)
		require.Equal(t, int64(1<<30), d.Info().TotalMemory)
		require.Contains(t, strings.Join(d.Warnings(), "\n"), "under-reports unified memory (268435456 B)")

		t.Setenv(v.envPrefix+"INTEGRATED", "0")
		d, _ = openFake(t, v, opts{})
		require.Equal(t, int64(256<<20), d.Info().TotalMemory)
		var w []string
		for _, s := range d.Warnings() {
			if !strings.Contains(s, "MemoryPoolsSupported") {
				w = append(w, s)
			}
		}
		require.Empty(t, w)
	})
}

// MemInfo is the memory-info call on the device thread: the fake answers
// from its FAKE_<RT>_MEM budget less what is allocated, a failure is the
// vendor's error, and a closed driver refuses it. An allocation that
// runs out of memory says what it answered.
func TestFakeMemInfo(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"MEM", "8388608")
		d, log := openFake(t, v, opts{})
		free, total, err := d.MemInfo()
		require.NoError(t, err)
		require.Equal(t, [2]int64{8 << 20, 8 << 20}, [2]int64{free, total})
		p, err := d.Malloc(3 << 20)
		require.NoError(t, err)
		free, _, err = d.MemInfo()
		require.NoError(t, err)
		require.Equal(t, int64(5<<20), free)
		require.NotEmpty(t, find(log.Lines(), v.fn("MemGetInfo")))

		a, err := alloc.New(d, alloc.Options{Name: "meminfo-" + v.name})
		require.NoError(t, err)
		_, err = a.Alloc(6 << 20)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.Contains(t, err.Error(), "device 8.00 MiB total, 5.00 MiB free")
		require.NoError(t, a.Close())
		require.NoError(t, d.Free(p))

		v.fail(t, v.fn("MemGetInfo")+":999")
		_, _, err = d.MemInfo()
		require.ErrorIs(t, err, driver.ErrDriver)
		require.Contains(t, err.Error(), v.failed(v.fn("MemGetInfo"), 999))
		require.NoError(t, d.Close())
		_, _, err = d.MemInfo()
		require.ErrorIs(t, err, alloc.ErrClosed)
	})
}
