package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// cudaHome makes $CUDA_HOME/lib64 with the libraries built by each entry
// (soname -> build), points CUDA_HOME at it and clears the override, so the
// default search tries those sonames first, newest first.
func cudaHome(t *testing.T, libs map[string]func(t *testing.T, path string)) string {
	t.Helper()
	home := t.TempDir()
	lib := filepath.Join(home, "lib64")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	for name, build := range libs {
		build(t, filepath.Join(lib, name))
	}
	t.Setenv("CUDA_HOME", home)
	t.Setenv(LibEnv, "")
	return lib
}

func fakeWith(cflags ...string) func(*testing.T, string) {
	return func(t *testing.T, path string) { fake.Build(t, path, cflags...) }
}

func fileWith(content string) func(*testing.T, string) {
	return func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, []byte(content), 0o644)) }
}

// A library with no CUDA symbol at all: an ELF shared object, not a runtime.
func notRuntime(t *testing.T, path string) {
	gpurttest.BuildShared(t, path, []byte("int capalloc_not_cuda;\n"))
}

// Each way a library can open and still be unusable, as the first
// candidate (libcudart.so.13) before a working libcudart.so.12: the search
// moves on, the second is used and Runtime() reports it; alone, the first
// gives ErrBackendUnavailable naming it and saying how it failed.
func TestLoaderSkipsUnusableLibrary(t *testing.T) {
	const insufficient = "cudaRuntimeGetVersion returned 35 (CUDA driver version is insufficient for CUDA runtime version)"
	for _, c := range []struct {
		name  string
		build func(*testing.T, string)
		want  []string // in the first library's line
		code  int      // the *Error errors.As finds, 0: none
	}{
		{"no driver", fakeWith("-DFAKE_NO_DRIVER"), []string{
			"runtime version: " + insufficient,
			"no CUDA driver is installed (cudaDriverGetVersion reports 0: libcuda.so.1 is missing or cannot be loaded)"}, 35},
		{"driver too old", fakeWith("-DFAKE_RUNTIME_VERSION=13000"), []string{
			"runtime version: " + insufficient,
			"runtime 13 needs a driver for CUDA 13, driver supports 12.4 (runtime version from the file name)"}, 35},
		{"runtime too old", fakeWith("-DFAKE_RUNTIME_VERSION=11020"), []string{"runtime 11.2 is older than the minimum, 11.4"}, 0},
		{"not a CUDA runtime", notRuntime, []string{"not a CUDA runtime: no symbol cudaRuntimeGetVersion"}, 0},
		{"not a library", fileWith(strings.Repeat("not an ELF file\n", 64)), []string{"invalid ELF header"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib := cudaHome(t, map[string]func(*testing.T, string){
				"libcudart.so.13": c.build,
				"libcudart.so.12": fakeWith(),
			})
			first, second := filepath.Join(lib, "libcudart.so.13"), filepath.Join(lib, "libcudart.so.12")
			d, err := New(Options{})
			require.NoError(t, err, "the second library works")
			t.Cleanup(func() { d.Close() })
			path, rv, _ := d.Runtime()
			require.Equal(t, second, path, "Runtime reports the library in use")
			require.Equal(t, 12040, rv)

			_, err = loader.First([]string{first}, nil)
			require.ErrorIs(t, err, driver.ErrBackendUnavailable)
			line := lineOf(t, err.Error(), first+": ")
			for _, w := range c.want {
				require.Contains(t, line, w)
			}
			var e *Error
			if c.code != 0 {
				require.ErrorAs(t, err, &e, "errors.As finds the code")
				require.Equal(t, c.code, e.Code)
			} else {
				require.False(t, errors.As(err, &e), "no runtime call failed: %v", err)
			}
			require.False(t, loader.Loaded(first), "a library that failed is not remembered")
		})
	}
}

// lineOf returns the line of msg that contains part.
func lineOf(t *testing.T, msg, part string) string {
	t.Helper()
	for _, l := range strings.Split(msg, "\n") {
		if strings.Contains(l, part) {
			return l
		}
	}
	t.Fatalf("no line with %q in:\n%s", part, msg)
	return ""
}

// When no library is usable the message lists every one tried with its
// reason, in order, and says some opened.
func TestLoaderNamesEveryLibraryTried(t *testing.T) {
	lib := cudaHome(t, map[string]func(*testing.T, string){
		"libcudart.so.13":   fakeWith("-DFAKE_RUNTIME_VERSION=13000"),
		"libcudart.so.12":   fakeWith("-DFAKE_NO_DRIVER"),
		"libcudart.so.11.0": fileWith("#!/bin/sh\n"),
	})
	paths := []string{filepath.Join(lib, "libcudart.so.13"), filepath.Join(lib, "libcudart.so.12"),
		filepath.Join(lib, "libcudart.so.11.0"), filepath.Join(lib, "libcudart.so")}
	_, err := loader.First(paths, nil)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	msg := err.Error()
	require.Contains(t, msg, "no usable CUDA runtime library")
	last := -1
	for _, p := range paths {
		i := strings.Index(msg, "\n  "+p+": ")
		require.Greater(t, i, last, "%s is listed, in order:\n%s", p, msg)
		last = i
	}
	require.Contains(t, msg, "runtime 13 needs a driver for CUDA 13, driver supports 12.4")
	require.Contains(t, msg, "no CUDA driver is installed")
	require.Contains(t, msg, "No such file or directory")

	// Loading again tries them again: nothing failed was remembered.
	_, err2 := loader.First(paths, nil)
	require.Equal(t, msg, err2.Error())
}

// The override stays the only candidate: a broken one is not replaced by
// a working library elsewhere on the search path.
func TestLoaderOverrideIsOnlyCandidate(t *testing.T) {
	lib := cudaHome(t, map[string]func(*testing.T, string){"libcudart.so.12": fakeWith()})
	broken := filepath.Join(t.TempDir(), "libcudart.so.13")
	fake.Build(t, broken, "-DFAKE_NO_DRIVER")
	t.Setenv(LibEnv, broken)
	_, err := New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), broken+": runtime version: cudaRuntimeGetVersion returned 35")
	require.NotContains(t, err.Error(), lib)
}

// A code that means "no usable driver or device" at any step of bind and
// open, not only cudaRuntimeGetVersion, is ErrBackendUnavailable naming the
// library, with the code kept.
func TestUnavailableCodeAtEveryStep(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
		code int
	}{
		{"driver version fails", map[string]string{"FAKE_CUDA_FAIL": "cudaDriverGetVersion:3"},
			"driver version: cudaDriverGetVersion returned 3", 3},
		{"runtime version: no device", map[string]string{"FAKE_CUDA_DEVICES": "0"},
			"runtime version: cudaRuntimeGetVersion returned 100 (no CUDA-capable device is detected)", 100},
		{"runtime version: unknown code", map[string]string{"FAKE_CUDA_FAIL": "cudaRuntimeGetVersion:999"},
			"runtime version: cudaRuntimeGetVersion returned 999", 999},
		{"device count: 35", map[string]string{"FAKE_CUDA_FAIL": "cudaGetDeviceCount:35"},
			"count devices: cudaGetDeviceCount returned 35 (CUDA driver version is insufficient for CUDA runtime version): the driver supports CUDA 12.4, older than this runtime needs", 35},
		{"set device: 35", map[string]string{"FAKE_CUDA_FAIL": "cudaSetDevice:35"},
			"make device 0 current: cudaSetDevice returned 35", 35},
		{"set device: no driver library", map[string]string{"FAKE_CUDA_FAIL": "cudaSetDevice:34"},
			"make device 0 current: cudaSetDevice returned 34", 34},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := fake.Lib(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := New(Options{})
			require.ErrorIs(t, err, driver.ErrBackendUnavailable)
			require.Contains(t, err.Error(), path+": "+c.want)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, c.code, e.Code)
		})
	}
}

// The runtime's version from its file name, for a runtime that cannot
// report it (no driver, or one too old).
func TestFileVersion(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "libcudart.so.11.8.89")
	require.NoError(t, os.WriteFile(real, nil, 0o644))
	require.NoError(t, os.Symlink(real, filepath.Join(dir, "libcudart.so.11.0")))
	for path, want := range map[string]string{
		"libcudart.so.13":                       "13",
		"/opt/cuda/lib64/libcudart.so.12":       "12",
		"/opt/cuda/lib64/libcudart.so.12.4.127": "12.4",
		filepath.Join(dir, "libcudart.so.11.0"): "11.8",
		"libcudart.so":                          "",
		"/x/libfoo.so.3":                        "",
	} {
		got, major := fileVersion(path)
		require.Equal(t, want, got, path)
		require.Equal(t, want != "", major > 0, path)
	}
}
