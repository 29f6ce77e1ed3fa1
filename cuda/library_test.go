package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLibrarySearchOrder(t *testing.T) {
	require.Equal(t, []string{
		"libcudart.so.13", "libcudart.so.12", "libcudart.so",
		"/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so",
	}, candidates(env(nil)))
	require.Equal(t, []string{
		"/opt/cuda/lib64/libcudart.so.13", "/opt/cuda/lib64/libcudart.so.12", "/opt/cuda/lib64/libcudart.so",
		"libcudart.so.13", "libcudart.so.12", "libcudart.so",
		"/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so",
	}, candidates(env(map[string]string{"CUDA_HOME": "/opt/cuda"})))
	require.Equal(t, []string{"/x/libcudart.so.12"},
		candidates(env(map[string]string{LibEnv: " /x/libcudart.so.12 ", "CUDA_HOME": "/opt/cuda"})), "the override is the only candidate")
}

func TestUnavailableNamesEveryPathAndReason(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "cuda")
	require.NoError(t, os.MkdirAll(filepath.Join(home, "lib64"), 0o755))
	// Not a library: dlopen must fail with its reason, not crash.
	require.NoError(t, os.WriteFile(filepath.Join(home, "lib64", "libcudart.so.12"), []byte(strings.Repeat("not an ELF file\n", 64)), 0o644))
	rt, err := loadRuntime(env(map[string]string{"CUDA_HOME": home}))
	if err == nil {
		t.Skipf("a real CUDA runtime is installed here (%s): the search found it", rt.path)
	}
	require.ErrorIs(t, err, alloc.ErrBackendUnavailable)
	for _, p := range candidates(env(map[string]string{"CUDA_HOME": home})) {
		require.Contains(t, err.Error(), p)
	}
	require.Contains(t, err.Error(), filepath.Join(home, "lib64", "libcudart.so.12")+": ")
	require.Contains(t, err.Error(), "invalid ELF header", "dlopen's reason is kept")
	require.Contains(t, err.Error(), LibEnv, "the message says how to point at a library")
}

func TestOverrideToNonLibraryIsUnavailable(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "libcudart.so")
	require.NoError(t, os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o644))
	t.Setenv(LibEnv, bad)
	_, err := New(Options{})
	require.ErrorIs(t, err, alloc.ErrBackendUnavailable)
	require.Equal(t, 1, strings.Count(err.Error(), bad+":"), "the override alone is tried: %v", err)

	t.Setenv(LibEnv, filepath.Join(t.TempDir(), "missing.so"))
	_, err = New(Options{})
	require.ErrorIs(t, err, alloc.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "No such file or directory")
}

func TestLibraryWithoutCUDASymbolsIsUnavailable(t *testing.T) {
	// libc is a real shared object, but not a CUDA runtime.
	t.Setenv(LibEnv, "libc.so.6")
	_, err := New(Options{})
	require.ErrorIs(t, err, alloc.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "is not a CUDA runtime: no symbol cudaRuntimeGetVersion")
}
