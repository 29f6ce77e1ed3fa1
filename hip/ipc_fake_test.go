package hip

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// fill writes b at p through a blocking copy on a fresh stream.
func fill(t *testing.T, d *Driver, p alloc.DevicePtr, b []byte) {
	t.Helper()
	s, err := d.CreateStream()
	require.NoError(t, err)
	defer d.DestroyStream(s)
	require.NoError(t, d.CopyHtoD(p, b, s))
}

// read reads n bytes at p.
func read(t *testing.T, d *Driver, p alloc.DevicePtr, n int) []byte {
	t.Helper()
	s, err := d.CreateStream()
	require.NoError(t, err)
	defer d.DestroyStream(s)
	out := make([]byte, n)
	require.NoError(t, d.CopyDtoH(out, p, s))
	return out
}

// A handle of a hipMalloc allocation, opened again, maps the same bytes at
// another address (the fake allows opening in the exporting process; the
// real runtime's behavior there is not modelled). On 6.x the open passes
// hipIpcMemLazyEnablePeerAccess as 1.
func TestFakeIPCHandleRoundTrip(t *testing.T) {
	d, log := openFake(t, Options{})
	var _ alloc.IPCMemory = d
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
	require.Len(t, find(log.Lines(), "hipIpcOpenMemHandle", "size=4096 flags=1"), 1, "by value: the handle's fields reached C intact")
	require.Equal(t, bytes.Repeat([]byte{0x5A}, 4096), read(t, d, q, 4096))
	fill(t, d, q, bytes.Repeat([]byte{0x33}, 4096))
	require.Equal(t, bytes.Repeat([]byte{0x33}, 4096), read(t, d, p, 4096), "one memory, two mappings")
	require.NoError(t, d.IPCCloseMemHandle(q))
	require.ErrorIs(t, d.IPCCloseMemHandle(q), alloc.ErrInvalidValue, "closed twice: hipErrorInvalidHandle")
	require.NoError(t, d.Free(p))
}

// ROCm 5.x's header defines hipIpcMemLazyEnablePeerAccess as 0.
func TestFakeIPCFlagsOn56(t *testing.T) {
	t.Setenv("FAKE_HIP_VERSION", "50600000")
	d, log := openFake(t, Options{})
	p, err := d.Malloc(64)
	require.NoError(t, err)
	h, err := d.IPCGetMemHandle(p)
	require.NoError(t, err)
	q, err := d.IPCOpenMemHandle(h)
	require.NoError(t, err)
	require.Len(t, find(log.Lines(), "hipIpcOpenMemHandle", "flags=0"), 1)
	require.NoError(t, d.IPCCloseMemHandle(q))
}

// Only synchronous allocations export (the header: "created with
// hipMalloc"); bad handles are refused, short ones before any call.
func TestFakeIPCRefusals(t *testing.T) {
	d, log := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	p, err := d.MallocAsync(4096, s)
	require.NoError(t, err)
	_, err = d.IPCGetMemHandle(p)
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "a pool allocation")
	require.Contains(t, err.Error(), "hipIpcGetMemHandle: invalid value (hipErrorInvalidValue, 1)")
	_, err = d.IPCGetMemHandle(0)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)

	log.Lines()
	_, err = d.IPCOpenMemHandle(make([]byte, 63))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Empty(t, find(log.Lines(), "hipIpcOpenMemHandle"), "refused before the runtime")
	_, err = d.IPCOpenMemHandle(make([]byte, 64))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "(hipErrorInvalidHandle, 400)")
}

// ipcChildEnv carries the handle to the child of TestFakeIPCAcrossProcesses.
const ipcChildEnv = "CAPALLOC_TEST_HIP_IPC_HANDLE"

// Another process opens the handle, reads what this one wrote and writes
// back: the fake maps the exporter's memory through /proc/PID/fd, so the
// handle's bytes are all the child gets.
func TestFakeIPCAcrossProcesses(t *testing.T) {
	if hx := os.Getenv(ipcChildEnv); hx != "" {
		ipcChild(t, hx)
		return
	}
	d, _ := openFake(t, Options{})
	p, err := d.Malloc(1024)
	require.NoError(t, err)
	fill(t, d, p, bytes.Repeat([]byte("parent"), 1024/6+1)[:1024])
	h, err := d.IPCGetMemHandle(p)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakeIPCAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), ipcChildEnv+"="+hex.EncodeToString(h))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
	require.Equal(t, bytes.Repeat([]byte("child!"), 1024/6+1)[:1024], read(t, d, p, 1024), "the child's write is here")
}

func ipcChild(t *testing.T, hx string) {
	h, err := hex.DecodeString(hx)
	require.NoError(t, err)
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()
	q, err := d.IPCOpenMemHandle(h)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte("parent"), 1024/6+1)[:1024], read(t, d, q, 1024))
	fill(t, d, q, bytes.Repeat([]byte("child!"), 1024/6+1)[:1024])
	require.NoError(t, d.IPCCloseMemHandle(q))
}

// Through the Allocator the IPC calls are guarded like AllocSync: refused
// during a Global capture with no runtime call, allowed after it.
func TestFakeIPCThroughAllocatorIsGuarded(t *testing.T) {
	d, log := openFake(t, Options{})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := a.AllocSync(4096)
	require.NoError(t, err)
	h, err := a.IPCGetMemHandle(b)
	require.NoError(t, err)

	require.NoError(t, a.BeginCapture(alloc.Global))
	log.Lines()
	_, err = a.IPCGetMemHandle(b)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	_, err = a.IPCOpenMemHandle(h)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.ErrorIs(t, a.IPCCloseMemHandle(1), alloc.ErrCaptureIllegalOp)
	require.Empty(t, find(log.Lines(), "hipIpc"), "no runtime call during the capture")
	g, err := a.EndCapture()
	require.NoError(t, err, "the capture survived")
	require.NoError(t, g.Close())

	q, err := a.IPCOpenMemHandle(h)
	require.NoError(t, err)
	require.NoError(t, a.IPCCloseMemHandle(q))
	require.NoError(t, a.Free(b))
	_, err = a.IPCGetMemHandle(b)
	require.ErrorIs(t, err, alloc.ErrInvalidBuffer, "a freed buffer")
}

// A backend without IPC says so.
func TestIPCOnBackendWithoutIt(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := a.AllocSync(64)
	require.NoError(t, err)
	_, err = a.IPCGetMemHandle(b)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "no IPC memory handles")
}
