package nccl_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// fresh makes Load and LoadRCCL search again, now and after the test.
func fresh(t *testing.T) {
	nccl.Forget()
	t.Cleanup(nccl.Forget)
}

// The stand-in built as RCCL 2.21.5 loads through LoadRCCLPath and, from
// CAPALLOC_RCCL_LIB, through LoadRCCL; the oldest capturable version,
// 2.13.4, loads too.
func TestRCCLLoads(t *testing.T) {
	fresh(t)
	path := buildFake(t, "-DFAKE_RCCL", "-DFAKE_VERSION=22105")
	l, err := nccl.LoadRCCLPath(path)
	require.NoError(t, err)
	require.True(t, l.RCCL)
	require.Equal(t, "2.21.5", nccl.VersionString(l.Version))

	t.Setenv(nccl.EnvRCCLLib, path)
	l, err = nccl.LoadRCCL()
	require.NoError(t, err)
	require.Equal(t, path, l.Path)
	again, err := nccl.LoadRCCL()
	require.NoError(t, err)
	require.Same(t, l, again, "loaded once per process")

	l, err = nccl.LoadRCCLPath(buildFake(t, "-DFAKE_RCCL", "-DFAKE_VERSION=21304"))
	require.NoError(t, err, "2.13.4 is the minimum")
	require.Equal(t, nccl.MinRCCLVersion, l.Version)
}

// RCCL 2.12.10 (ROCm 5.3) captured collectives only with
// RCCL_ENABLE_HIPGRAPH set: refused, with both versions in the message.
func TestRCCLTooOldIsRefused(t *testing.T) {
	fresh(t)
	path := buildFake(t, "-DFAKE_RCCL", "-DFAKE_VERSION=21210")
	_, err := nccl.LoadRCCLPath(path)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.NotErrorIs(t, err, nccl.ErrWrongLibrary)
	require.Contains(t, err.Error(), path)
	require.Contains(t, err.Error(), "RCCL version 2.12.10 is older than 2.13.4")
	t.Setenv(nccl.EnvRCCLLib, path)
	_, err = nccl.LoadRCCL()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "2.12.10")
}

// NCCL where RCCL is asked for, and RCCL where NCCL is, are
// ErrWrongLibrary (an driver.ErrBackendUnavailable), naming the path and
// why, by path and through the search.
func TestWrongLibraryBothWays(t *testing.T) {
	fresh(t)
	ncclPath := buildFake(t)
	rcclPath := buildFake(t, "-DFAKE_RCCL")

	_, err := nccl.LoadRCCLPath(ncclPath)
	require.ErrorIs(t, err, nccl.ErrWrongLibrary)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), ncclPath+": it is NCCL, not RCCL (it lacks ncclAllToAllv")

	_, err = nccl.LoadPath(rcclPath)
	require.ErrorIs(t, err, nccl.ErrWrongLibrary)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), rcclPath+": it is RCCL (it exports ncclAllToAllv")

	t.Setenv(nccl.EnvRCCLLib, ncclPath)
	_, err = nccl.LoadRCCL()
	require.ErrorIs(t, err, nccl.ErrWrongLibrary, "through the search too")
	require.Contains(t, err.Error(), ncclPath)
	t.Setenv(nccl.EnvLib, rcclPath)
	_, err = nccl.Load()
	require.ErrorIs(t, err, nccl.ErrWrongLibrary)
	require.Contains(t, err.Error(), rcclPath)
}

// Without CAPALLOC_RCCL_LIB the search tries the loader's names, then
// $ROCM_PATH/lib and /opt/rocm/lib, and names each one when none is
// usable; with it, that path alone.
func TestRCCLMissingListsEveryPath(t *testing.T) {
	fresh(t)
	t.Setenv(nccl.EnvRCCLLib, "")
	t.Setenv("ROCM_PATH", "/nonexistent/rocm")
	l, err := nccl.LoadRCCL()
	if err == nil { // a real RCCL on this machine
		require.True(t, l.RCCL)
		require.GreaterOrEqual(t, l.Version, nccl.MinRCCLVersion)
		return
	}
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	for _, p := range []string{"librccl.so.1", "librccl.so:", "/nonexistent/rocm/lib/librccl.so.1", "/opt/rocm/lib/librccl.so.1", "set " + nccl.EnvRCCLLib} {
		require.Contains(t, err.Error(), p)
	}

	t.Setenv(nccl.EnvRCCLLib, "/nonexistent/my-rccl.so")
	_, err = nccl.LoadRCCL()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "/nonexistent/my-rccl.so")
	require.NotContains(t, err.Error(), "/opt/rocm", "the variable's path alone")
}

// LoadFor picks NCCL for cuda and RCCL for hip.
func TestLoadFor(t *testing.T) {
	fresh(t)
	t.Setenv(nccl.EnvLib, buildFake(t))
	t.Setenv(nccl.EnvRCCLLib, buildFake(t, "-DFAKE_RCCL"))
	l, err := nccl.LoadFor("cuda")
	require.NoError(t, err)
	require.False(t, l.RCCL)
	l, err = nccl.LoadFor("hip")
	require.NoError(t, err)
	require.True(t, l.RCCL)
	for _, name := range []string{"cpu", "plugin:cuda", ""} {
		_, err = nccl.LoadFor(name)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
	}
}

// An RCCL communicator belongs to the hip driver's capture domain: made
// under a Global capture there it is refused with no call, while a Global
// capture in the cuda domain does not stop it; NCCL's the other way round.
func TestCommunicatorsJoinTheirDriversCaptureDomain(t *testing.T) {
	fresh(t)
	rccl, err := nccl.LoadRCCLPath(buildFake(t, "-DFAKE_RCCL"))
	require.NoError(t, err)
	ncclLib, err := nccl.LoadPath(buildFake(t))
	require.NoError(t, err)
	for _, tc := range []struct {
		l            *nccl.Library
		own, another string
	}{
		{rccl, "hip", "cuda"},
		{ncclLib, "cuda", "hip"},
	} {
		f := openFake(t, tc.l)
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		capturing := func(domain string) (end func()) {
			a := domainAllocator(t, domain, alloc.Options{})
			require.NoError(t, a.BeginCapture(alloc.Global))
			return func() {
				g, err := a.EndCapture()
				require.NoError(t, err)
				require.NoError(t, errors.Join(g.Close(), a.Close()))
			}
		}

		end := capturing(tc.own)
		dev := &onCaller{}
		_, err = f.l.InitRank(dev, 1, id, 0)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "RCCL=%v during a Global capture in %s", tc.l.RCCL, tc.own)
		require.Zero(t, dev.calls.Load())
		end()

		end = capturing(tc.another)
		c, err := f.l.InitRank(dev, 1, id, 0)
		require.NoError(t, err, "RCCL=%v: a capture in %s is another runtime's", tc.l.RCCL, tc.another)
		require.NoError(t, c.Destroy())
		end()
	}
}
