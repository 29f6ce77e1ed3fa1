package nccl_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

func TestMissingLibraryIsExplained(t *testing.T) {
	t.Setenv(nccl.EnvLib, "/nonexistent/libnccl.so.2")
	_, err := nccl.Load()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "/nonexistent/libnccl.so.2")
	require.Contains(t, err.Error(), "set "+nccl.EnvLib)
}

func TestNotAnNCCLLibraryIsRefused(t *testing.T) {
	t.Setenv(nccl.EnvLib, "libc.so.6")
	_, err := nccl.Load()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "not an NCCL library (no ncclGetVersion)")
}

// Without CAPALLOC_NCCL_LIB the search either finds a capturable NCCL or
// says what it tried; it never panics.
func TestDefaultSearch(t *testing.T) {
	t.Setenv(nccl.EnvLib, "")
	l, err := nccl.Load()
	if err != nil {
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), "libnccl.so.2")
		return
	}
	require.GreaterOrEqual(t, l.Version, nccl.MinVersion)
}

func TestVersionString(t *testing.T) {
	require.Equal(t, "2.27.3", nccl.VersionString(22703))
}
