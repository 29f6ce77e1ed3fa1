package gpurt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The override is the only candidate: a file that is not a library, or
// no file, is unavailable with dlopen's reason, and nothing else is tried.
func TestOverrideToNonLibraryIsUnavailable(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		bad := filepath.Join(t.TempDir(), v.fake.Name+".so")
		require.NoError(t, os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o644))
		t.Setenv(v.fake.LibEnv, bad)
		_, err := v.open(opts{})
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Equal(t, 1, strings.Count(err.Error(), bad+":"), "the override alone is tried: %v", err)

		t.Setenv(v.fake.LibEnv, filepath.Join(t.TempDir(), "missing.so"))
		_, err = v.open(opts{})
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), "No such file or directory")
	})
}

// A shared object that is not the runtime is unavailable, and says so.
func TestLibraryWithoutRuntimeSymbolsIsUnavailable(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		// libc is a real shared object, but not a GPU runtime.
		t.Setenv(v.fake.LibEnv, "libc.so.6")
		_, err := v.open(opts{})
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), v.notRuntime)
	})
}
