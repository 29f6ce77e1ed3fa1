package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// stagingBackend is a backend whose child has no DirectSpan ("faulty"
// wraps cpu behind driver.Driver), so its blocking pageable copies stage
// too; over plugin:cpu they take the single-copy path (direct_test.go).
const stagingBackend = "plugin:faulty"

// Pageable copies of several sizes, across chunk boundaries, round trip.
func TestStagedCopies(t *testing.T) {
	d, s := openStream(t, stagingBackend)
	for _, n := range []int{0, 1, 4096, chunk - 1, chunk, chunk + 1, 3*chunk + 12345} {
		p, err := d.MallocAsync(int64(max(n, 1)), s)
		require.NoError(t, err)
		src := pattern(n, byte(n))
		require.NoError(t, d.CopyHtoD(p, src, s), "size %d", n)
		got := make([]byte, n)
		require.NoError(t, d.CopyDtoH(got, p, s), "size %d", n)
		require.True(t, bytes.Equal(src, got), "size %d: blocking round trip", n)

		src2 := pattern(n, byte(n)+1)
		require.NoError(t, d.CopyHtoDAsync(p, src2, s), "pageable async upload is staged")
		got2 := make([]byte, n)
		require.NoError(t, d.CopyDtoHAsync(got2, p, s), "pageable async download is blocking")
		require.True(t, bytes.Equal(src2, got2), "size %d: async pageable round trip", n)
		require.NoError(t, d.FreeAsync(p, s))
	}
	require.NoError(t, d.StreamSynchronize(s))
}

// A copy past its allocation fails before any byte lands, as in process,
// over the single-copy path (plugin:cpu) and through staging.
func TestStagedCopyOutOfRangeWritesNothing(t *testing.T) {
	for _, backend := range []string{"plugin:cpu", stagingBackend} {
		t.Run(backend, func(t *testing.T) {
			d := open(t, backend)
			s, err := d.CreateStream()
			require.NoError(t, err)
			n := 2*chunk + 100
			p, err := d.Malloc(int64(n))
			require.NoError(t, err)
			err = d.CopyHtoD(p, pattern(n+1, 1), s)
			require.ErrorIs(t, err, alloc.ErrInvalidValue)
			err = d.CopyHtoDAsync(p, pattern(n+1, 2), s)
			require.ErrorIs(t, err, alloc.ErrInvalidValue)
			got := make([]byte, n)
			require.NoError(t, d.CopyDtoH(got, p, s))
			require.Equal(t, make([]byte, n), got, "nothing was written")
			require.ErrorIs(t, d.CopyDtoH(make([]byte, n+1), p, s), alloc.ErrInvalidValue)
			require.NoError(t, d.Free(p))
		})
	}
}

// Host buffers are shared: a captured upload reads the bytes the host
// wrote before each replay, and a captured download lands in the host's
// view, with no bytes in any message.
func TestHostBufferIsSharedAndReplaysFresh(t *testing.T) {
	d := open(t, "plugin:cpu")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	in, err := a.HostAlloc(1 << 20)
	require.NoError(t, err)
	out, err := a.HostAlloc(1 << 20)
	require.NoError(t, err)
	buf, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(buf, 0, in, 0, 1<<20); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, buf, 0, 1<<20)
	})
	require.NoError(t, err)
	for seed := byte(1); seed < 4; seed++ {
		copy(in.Bytes(), pattern(1<<20, seed))
		require.NoError(t, g.Launch())
		require.NoError(t, a.Synchronize())
		require.Equal(t, pattern(1<<20, seed), out.Bytes(), "replay %d", seed)
	}
	u, err := d.Usage()
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), u.Host, "the backend counts the shared buffers")
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(buf))
	require.NoError(t, in.Close())
	require.NoError(t, out.Close())
	require.NoError(t, a.Close())
	u, err = d.Usage()
	require.NoError(t, err)
	require.Zero(t, u.Host)
}

func TestHostFreeBadInput(t *testing.T) {
	d := open(t, "plugin:cpu")
	h, err := d.HostAlloc(4096)
	require.NoError(t, err)
	require.ErrorIs(t, d.HostFree(h[1:]), alloc.ErrInvalidValue)
	require.ErrorIs(t, d.HostFree(make([]byte, 4096)), alloc.ErrInvalidValue)
	h[0] = 42 // still mapped: the bad frees changed nothing
	require.NoError(t, d.HostFree(h))
	require.ErrorIs(t, d.HostFree(h), alloc.ErrInvalidValue, "double free")
}

func TestOptions(t *testing.T) {
	d := open(t, "plugin:cpu:memory_limit=1MiB,plugin.call_timeout=5s,plugin.start_timeout=20s")
	require.Equal(t, int64(1<<20), d.Info().TotalMemory, "backend options are forwarded")
	require.Equal(t, "plugin:cpu", d.Name())
	require.Contains(t, d.CaptureDomain(), "plugin#")

	for _, bad := range []string{
		"plugin:cpu:memroy_limit=1GiB", // the child's Check
		"plugin:cpu:plugin.timeout=1s", // an unknown host option
		"plugin:cpu:plugin.call_timeout=soon",
		"plugin:cpu:plugin.call_timeout=0s",
		"plugin:cpu:plugin.sha256=abc",
		"plugin:cpu:plugin.backend=cpu", // only with a path
	} {
		_, err := backends.OpenDriver(ctx, bad)
		require.ErrorIs(t, err, backends.ErrInvalidConfig, bad)
	}
	_, err := backends.OpenDriver(ctx, "plugin:no-such-backend")
	require.ErrorIs(t, err, backends.ErrUnknownBackend)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	_, err = backends.OpenDriver(ctx, "plugin:/nonexistent/capalloc-plugin")
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
}

// ownBinary is the running test binary's path and contents.
func ownBinary(t *testing.T) (string, []byte) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(exe)
	require.NoError(t, err)
	return exe, data
}

func TestChecksum(t *testing.T) {
	exe, data := ownBinary(t)
	sum := sha256.Sum256(data)

	d := open(t, "plugin:"+exe+":plugin.backend=cpu,plugin.sha256="+hex.EncodeToString(sum[:]))
	_, err := d.CreateStream()
	require.NoError(t, err)

	wrong := sha256.Sum256([]byte("not this binary"))
	_, err = backends.OpenDriver(ctx, "plugin:"+exe+":plugin.backend=cpu,plugin.sha256="+hex.EncodeToString(wrong[:]))
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "does not match")
}

// The binary that runs is the one whose checksum was checked: a file
// swapped in at the path after the check (here a script that exits at
// once) is not what the host executes.
func TestChecksumRunsTheCheckedFile(t *testing.T) {
	_, data := ownBinary(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "capalloc-plugin")
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	sum := sha256.Sum256(data)
	evil := filepath.Join(dir, "evil")
	require.NoError(t, os.WriteFile(evil, []byte("#!/bin/sh\nexit 7\n"), 0o755))
	afterChecksum = func() { require.NoError(t, os.Rename(evil, bin)) }
	defer func() { afterChecksum = nil }()

	d := open(t, "plugin:"+bin+":plugin.backend=cpu,plugin.start_timeout=20s,plugin.sha256="+hex.EncodeToString(sum[:]))
	_, err := d.CreateStream()
	require.NoError(t, err)
	got, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.Contains(t, string(got), "exit 7", "the path was swapped")
}

func TestPathNeedsBackendWhenSeveral(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	// This binary links cpu and faulty: it cannot guess.
	_, err = backends.OpenDriver(ctx, "plugin:"+exe)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	require.Contains(t, err.Error(), "plugin.backend")
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "engine")
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	noPath := func(string) (string, error) { return "", os.ErrNotExist }

	_, err := findBinary(getenv, false, exe, noPath)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), filepath.Join(dir, BinaryName))

	onPath := func(string) (string, error) { return "/usr/bin/capalloc-plugin", nil }
	p, err := findBinary(getenv, false, exe, onPath)
	require.NoError(t, err)
	require.Equal(t, "/usr/bin/capalloc-plugin", p)

	require.NoError(t, os.WriteFile(filepath.Join(dir, BinaryName), []byte("#!/bin/false\n"), 0o755))
	p, err = findBinary(getenv, false, exe, onPath)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, BinaryName), p, "next to the program beats $PATH")

	p, err = findBinary(getenv, true, exe, onPath)
	require.NoError(t, err)
	require.Equal(t, exe, p, "a self-serving program runs itself")

	env[EnvBinary] = "/opt/x/capalloc-plugin"
	p, err = findBinary(getenv, true, exe, onPath)
	require.NoError(t, err)
	require.Equal(t, "/opt/x/capalloc-plugin", p, "$CAPALLOC_PLUGIN is explicit and wins")
}

func TestWireErrorsKeepSentinels(t *testing.T) {
	srv := newServer()
	_, err := decodeReply(srv.encodeReply(&reply{}, fmt.Errorf("%w: cpu: boom", backends.ErrInvalidConfig)))
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.NotErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "cpu: boom")

	_, err = decodeReply(nil)
	require.ErrorIs(t, err, driver.ErrDriver)
	_, err = decodeReply([]byte{replyErr, 1, 0, 0, 0xff})
	require.ErrorIs(t, err, driver.ErrDriver, "a truncated reply is malformed, not a panic")
	_, err = decodeReply(srv.call(ctx, []byte{0, byte(opMalloc)}))
	require.ErrorIs(t, err, alloc.ErrClosed, "no backend open yet")
	_, err = decodeReply(srv.call(ctx, []byte{0, byte(opOpen), 0x80}))
	require.ErrorIs(t, err, driver.ErrDriver, "a malformed request is an error reply")
	_, err = decodeReply(srv.call(ctx, []byte{0x80}))
	require.ErrorIs(t, err, driver.ErrDriver, "so is a malformed header")
}

func TestUsageUnsupportedWhenTheBackendDoesNotCount(t *testing.T) {
	_, err := open(t, "plugin:cpu").Usage()
	require.NoError(t, err)
	_, err = open(t, "plugin:faulty").Usage() // wraps the cpu driver as a plain driver.Driver
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// The backend's free memory crosses the process boundary
// (driver.MemInfoer), and an out-of-memory error of an allocator over the
// plugin says it; a backend that cannot tell answers ErrUnsupported.
func TestMemInfoPassesThrough(t *testing.T) {
	d := open(t, "plugin:cpu:memory_limit=8MiB")
	free, total, err := d.MemInfo()
	require.NoError(t, err)
	require.Equal(t, [2]int64{8 << 20, 8 << 20}, [2]int64{free, total})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	b, err := a.AllocSync(3 << 20)
	require.NoError(t, err)
	free, _, err = d.MemInfo()
	require.NoError(t, err)
	require.Equal(t, int64(5<<20), free)
	_, err = a.AllocSync(6 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "device 8.00 MiB total, 5.00 MiB free")
	require.NoError(t, a.Free(b))
	require.NoError(t, a.Close())

	_, _, err = open(t, "plugin:faulty").MemInfo() // wraps the cpu driver as a plain driver.Driver
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// A request whose deadline passes while it waits behind pipelined
// operations that have not run replies ErrBackendHung, never a plain
// driver error: the host kills the backend for it even when the reply
// beats the host's own timer (which a loaded machine showed it can).
func TestWaitBehindPipelinedOpsPastDeadlineIsHung(t *testing.T) {
	srv := newServer()
	c, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	req := (&enc{}).u64(1) // after batch 1, which never runs
	req.b = append(req.b, byte(opMalloc))
	_, err := decodeReply(srv.call(c, req.b))
	require.ErrorIs(t, err, driver.ErrBackendHung)
	require.Contains(t, err.Error(), "waiting for pipelined operations")
}
