package nccl_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// The stand-in libnccl (testdata/fakenccl.c) is compiled with gcc and
// loaded with LoadPath, so the purego marshalling of the bootstrap calls
// (ncclUniqueId, 128 bytes by value) runs here without a GPU.

type fake struct {
	l        *nccl.Library
	h        uintptr // the library's handle, for its fake_* functions
	lastInit uintptr
}

// buildFake builds the stand-in with the preprocessor flags given
// (-DFAKE_NO_WINDOWS, -DFAKE_RCCL, -DFAKE_VERSION=N) and returns its path.
func buildFake(t *testing.T, cflags ...string) string {
	t.Helper()
	cc := os.Getenv("CC") // CC=aarch64-linux-gnu-gcc for an arm64 run under qemu
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no %s to build the stand-in libnccl: %v", cc, err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "fakenccl.c"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "libnccl-fake.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", path}, cflags...)
	cmd := exec.Command(cc, append(args, "-x", "c", "-", "-lpthread")...)
	cmd.Stdin = bytes.NewReader(src)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gcc: %s", out)
	return path
}

// loadFake builds the stand-in NCCL with the flags given and loads it.
func loadFake(t *testing.T, cflags ...string) *fake {
	t.Helper()
	path := buildFake(t, cflags...)
	l, err := nccl.LoadPath(path)
	require.NoError(t, err)
	require.Equal(t, "2.28.3", nccl.VersionString(l.Version))
	return openFake(t, l)
}

// openFake opens the stand-in l was loaded from, for its fake_* functions.
func openFake(t *testing.T, l *nccl.Library) *fake {
	t.Helper()
	h, err := purego.Dlopen(l.Path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	f := &fake{l: l, h: h}
	f.lastInit, err = purego.Dlsym(h, "fake_last_init")
	require.NoError(t, err)
	return f
}

// call calls the stand-in's function name (one of its fake_* test
// hooks) with args and returns its result.
func (f *fake) call(t *testing.T, name string, args ...uintptr) uintptr {
	t.Helper()
	p, err := purego.Dlsym(f.h, name)
	require.NoError(t, err)
	r, _, _ := purego.SyscallN(p, args...)
	return r
}

// last is what the stand-in's last ncclCommInitRank received.
func (f *fake) last() (nccl.UniqueID, int32, int32, int) {
	var (
		id          nccl.UniqueID
		ranks, rank int32
	)
	r, _, _ := purego.SyscallN(f.lastInit, uintptr(unsafe.Pointer(&id.Internal[0])), uintptr(unsafe.Pointer(&ranks)), uintptr(unsafe.Pointer(&rank)))
	return id, ranks, rank, int(r)
}

// onCaller stands in for *cuda.Driver: it runs fn on the caller's thread.
type onCaller struct{ calls atomic.Int32 }

func (d *onCaller) OnDevice(op string, fn func() error) error {
	d.calls.Add(1)
	return fn()
}

// The unique id crosses by value intact on this architecture's C ABI
// (amd64: on the stack; arm64: a pointer to a copy), with the count and
// rank around it in their registers.
func TestInitRankPassesTheUniqueIDByValue(t *testing.T) {
	f := loadFake(t)
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	require.NotEqual(t, nccl.UniqueID{}, id)
	dev := &onCaller{}
	c, err := f.l.InitRank(dev, 5, id, 3)
	require.NoError(t, err)
	require.Equal(t, 3, c.Rank())
	require.Equal(t, 5, c.Ranks())
	require.EqualValues(t, 1, dev.calls.Load(), "made on the device's thread")
	got, ranks, rank, inits := f.last()
	require.Equal(t, id, got)
	require.EqualValues(t, 5, ranks)
	require.EqualValues(t, 3, rank)
	require.Equal(t, 1, inits)
	require.NoError(t, c.Destroy())
}

func TestInitRankRefusesBadArguments(t *testing.T) {
	f := loadFake(t)
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	dev := &onCaller{}
	for _, tc := range []struct {
		name        string
		ranks, rank int
		id          nccl.UniqueID
	}{
		{"rank past the end", 2, 2, id},
		{"negative rank", 2, -1, id},
		{"no ranks", 0, 0, id},
		{"zero id", 2, 0, nccl.UniqueID{}},
	} {
		_, err := f.l.InitRank(dev, tc.ranks, tc.id, tc.rank)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, tc.name)
	}
	_, err = f.l.InitRank(nil, 1, id, 0)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Zero(t, dev.calls.Load(), "refused before any call")
	_, _, _, inits := f.last()
	require.Zero(t, inits)
}

// A communicator is not made during a Global-mode capture in the process:
// refused before NCCL is called.
func TestInitRankRefusedDuringGlobalCapture(t *testing.T) {
	f := loadFake(t)
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	a := domainAllocator(t, "cuda", alloc.Options{})
	require.NoError(t, a.BeginCapture(alloc.Global))
	dev := &onCaller{}
	_, err = f.l.InitRank(dev, 1, id, 0)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, dev.calls.Load())
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	c, err := f.l.InitRank(dev, 1, id, 0)
	require.NoError(t, err, "after the capture")
	require.NoError(t, c.Destroy())
}

// torchrun's MASTER_ADDR and MASTER_PORT become NCCL_COMM_ID in the C
// environment, where NCCL (here the stand-in) reads it, for the call only:
// afterwards the variable is gone, and a unique id is random again.
func TestInitFromEnvSetsNCCLCommID(t *testing.T) {
	f := loadFake(t)
	torchrunEnv(t)
	c, err := f.l.InitFromEnv(&onCaller{})
	require.NoError(t, err)
	requireJoinedFromEnv(t, f)
	require.Equal(t, 1, c.Rank())
	later, err := f.l.GetUniqueID()
	require.NoError(t, err)
	require.False(t, bytes.HasPrefix(later.Internal[:], []byte("env:")), "a later unique id does not come from NCCL_COMM_ID")

	// Rank 0 starts the root in ncclCommInitRank: the variable is still
	// set there (the stand-in checks, as NCCL reads it).
	t.Setenv("RANK", "0")
	c, err = f.l.InitFromEnv(&onCaller{})
	require.NoError(t, err)
	require.Equal(t, 0, c.Rank())
	_, set := os.LookupEnv("NCCL_COMM_ID")
	require.False(t, set)
}

// torchrunEnv sets torchrun's variables for rank 1 of 4 with the master
// at 10.1.2.3:29511, and unsets NCCL_COMM_ID (restored after the test).
func torchrunEnv(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "")
	require.NoError(t, os.Unsetenv("NCCL_COMM_ID"))
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "4")
	t.Setenv("MASTER_ADDR", "10.1.2.3")
	t.Setenv("MASTER_PORT", "29511")
}

// requireJoinedFromEnv requires that the last init saw torchrunEnv's
// address as NCCL_COMM_ID, as rank 1 of 4, and that the variable is gone
// again.
func requireJoinedFromEnv(t *testing.T, f *fake) {
	t.Helper()
	_, set := os.LookupEnv("NCCL_COMM_ID")
	require.False(t, set, "NCCL_COMM_ID restored")
	id, ranks, rank, _ := f.last()
	require.Equal(t, "env:10.1.2.3:29511", string(bytes.TrimRight(id.Internal[:], "\x00")), "NCCL saw NCCL_COMM_ID")
	require.EqualValues(t, 4, ranks)
	require.EqualValues(t, 1, rank)
}

func TestEnvFrom(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	e, err := nccl.EnvFrom(env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "node0", "MASTER_PORT", "29500"))
	require.NoError(t, err)
	require.Equal(t, nccl.Env{Rank: 0, WorldSize: 2, CommID: "node0:29500"}, e)
	e, err = nccl.EnvFrom(env("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "fe80::1", "MASTER_PORT", "29500"))
	require.NoError(t, err)
	require.Equal(t, "[fe80::1]:29500", e.CommID, "IPv6 in brackets, NCCL_COMM_ID's format")
	e, err = nccl.EnvFrom(env("RANK", "1", "WORLD_SIZE", "2", "NCCL_COMM_ID", "10.0.0.1:6000", "MASTER_ADDR", "x", "MASTER_PORT", "1"))
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:6000", e.CommID, "NCCL_COMM_ID wins")
	e, err = nccl.EnvFrom(env("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "[fe80::1]", "MASTER_PORT", "29500"))
	require.NoError(t, err)
	require.Equal(t, "[fe80::1]:29500", e.CommID, "a bracketed IPv6 address")
	e, err = nccl.EnvFrom(env("RANK", "1", "WORLD_SIZE", "2", "NCCL_COMM_ID", "[fe80::1%eth0]:6000"))
	require.NoError(t, err)
	require.Equal(t, "[fe80::1%eth0]:6000", e.CommID)
	for name, get := range map[string]func(string) string{
		"empty brackets":       env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "[]", "MASTER_PORT", "1"),
		"stray bracket":        env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "0]0", "MASTER_PORT", "1"),
		"host with a space":    env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a b", "MASTER_PORT", "1"),
		"host with a colon":    env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a:b", "MASTER_PORT", "1"),
		"signed port":          env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "+1"),
		"NCCL_COMM_ID no port": env("RANK", "0", "WORLD_SIZE", "2", "NCCL_COMM_ID", "10.0.0.1"),
		"NCCL_COMM_ID []":      env("RANK", "0", "WORLD_SIZE", "2", "NCCL_COMM_ID", "[]:1"),
		"NCCL_COMM_ID port 0":  env("RANK", "0", "WORLD_SIZE", "2", "NCCL_COMM_ID", "a:0"),
		"no RANK":              env("WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1"),
		"RANK past the end":    env("RANK", "2", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1"),
		"no address":           env("RANK", "0", "WORLD_SIZE", "2"),
		"bad port":             env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "70000"),
		"port not a number":    env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "http"),
	} {
		_, err := nccl.EnvFrom(get)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
	}
}

// Rank 0 publishes its id through a file; the others wait for it and all
// pass the same id to ncclCommInitRank.
func TestFileRendezvous(t *testing.T) {
	f := loadFake(t)
	path := filepath.Join(privateDir(t), "nccl-id")
	const ranks = 3
	ids := make([]nccl.UniqueID, ranks)
	joinRanks(t, ranks, func(r int) error {
		c, err := f.l.InitFromFile(&onCaller{}, path, ranks, r, 5*time.Second)
		if err == nil {
			ids[r], _, _, _ = f.last()
			err = c.Destroy()
		}
		return err
	})
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, nccl.UniqueIDBytes)

	// A stale file is refused by rank 0, and a missing one times out.
	_, err = f.l.FileRendezvous(path, 0, time.Second)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "already exists")
	start := time.Now()
	_, err = f.l.FileRendezvous(filepath.Join(privateDir(t), "never"), 1, 100*time.Millisecond)
	require.ErrorIs(t, err, nccl.ErrRendezvousTimeout)
	require.Less(t, time.Since(start), 2*time.Second)
	// A file that is not an id is refused.
	junk := filepath.Join(privateDir(t), "junk")
	require.NoError(t, os.WriteFile(junk, []byte("hello"), 0o600))
	_, err = f.l.FileRendezvous(junk, 1, time.Second)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)

	// A directory another user could write is refused, by rank 0 before it
	// makes an id and by the others before they read a forged one.
	shared := t.TempDir()
	require.NoError(t, os.Chmod(shared, 0o777))
	forged := filepath.Join(shared, "nccl-id")
	_, err = f.l.FileRendezvous(forged, 0, time.Second)
	require.ErrorIs(t, err, nccl.ErrUntrustedDir)
	_, statErr := os.Lstat(forged)
	require.ErrorIs(t, statErr, os.ErrNotExist, "rank 0 published nothing")
	require.NoError(t, os.WriteFile(forged, make([]byte, nccl.UniqueIDBytes), 0o666))
	_, err = f.l.FileRendezvous(forged, 1, time.Second)
	require.ErrorIs(t, err, nccl.ErrUntrustedDir)
	require.Contains(t, err.Error(), shared)
}

// privateDir is a fresh directory only this user can use (t.TempDir's is
// mode 0755), as FileRendezvous requires.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	return dir
}

// joinRanks runs join for every rank on a goroutine of its own, the
// highest rank first and rank 0 last, 20 ms apart (so the others are
// already waiting for rank 0's id), and requires every rank to succeed.
func joinRanks(t *testing.T, ranks int, join func(rank int) error) {
	t.Helper()
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := ranks - 1; r >= 0; r-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = join(r)
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
	}
}
