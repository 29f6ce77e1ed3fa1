package cuda

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// ipc=true creates the pool with cudaMemHandleTypePosixFileDescriptor, and
// ExportPool then gives a file descriptor; without it ExportPool refuses.
func TestFakeExportPool(t *testing.T) {
	d, log := openFake(t, Options{IPC: true})
	require.Len(t, find(log.lines(), "cudaMemPoolCreate allocType=1 handleTypes=1 locationType=1"), 1)
	fd, err := d.ExportPool()
	require.NoError(t, err)
	require.GreaterOrEqual(t, fd, 0)
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(fd, &st), "a real descriptor")
	require.NoError(t, syscall.Close(fd))
	require.Len(t, find(log.lines(), "cudaMemPoolExportToShareableHandle", "type=1 flags=0"), 1)

	d, _ = openFake(t, Options{})
	_, err = d.ExportPool()
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "ipc=true")
}

// poolChildEnv carries the export data to the child of
// TestFakePoolAcrossProcesses; the pool's descriptor is its fd 3.
const poolChildEnv = "CAPALLOC_TEST_CUDA_POOL_PTR"

// A pool allocation crosses processes the way CUDA documents it: the
// exporter's pool descriptor (inherited as fd 3) is imported, then the
// allocation's 64 bytes of export data; the child reads what the parent
// wrote, writes back, frees its import and closes the pool.
func TestFakePoolAcrossProcesses(t *testing.T) {
	if hx := os.Getenv(poolChildEnv); hx != "" {
		poolChild(t, hx)
		return
	}
	d, log := openFake(t, Options{IPC: true})
	s, err := d.CreateStream()
	require.NoError(t, err)
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
	require.Len(t, find(log.lines(), "cudaMemPoolExportPointer"), 1)

	cmd := exec.Command(os.Args[0], "-test.run=^TestFakePoolAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), poolChildEnv+"="+hex.EncodeToString(data))
	cmd.ExtraFiles = []*os.File{pool}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
	require.Equal(t, bytes.Repeat([]byte{0x5A}, 2048), read(t, d, p, 2048), "the child's write is here")
	require.NoError(t, d.FreeAsync(p, s))
}

func poolChild(t *testing.T, hx string) {
	data, err := hex.DecodeString(hx)
	require.NoError(t, err)
	d, err := New(Options{})
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
	d, log := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
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

	log.lines()
	_, err = d.ImportPool(-1)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Empty(t, find(log.lines(), "cudaMemPoolImportFromShareableHandle"), "refused before the runtime")
	_, err = d.ImportPool(1 << 20)
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "not an open descriptor")

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	ip, err := d.ImportPool(int(r.Fd()))
	require.NoError(t, err)
	require.Len(t, find(log.lines(), "cudaMemPoolImportFromShareableHandle", "fd="+strconv.Itoa(int(r.Fd()))+" type=1 flags=0"), 1,
		"the descriptor by value, cast to a pointer")
	_, err = ip.ImportPointer(make([]byte, 10))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Empty(t, find(log.lines(), "cudaMemPoolImportPointer"), "refused before the runtime")
	_, err = ip.ImportPointer(make([]byte, 64))
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "not export data")
	require.NoError(t, ip.Close())
}
