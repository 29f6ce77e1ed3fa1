package gpurttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// EndActiveCapture requires the capture on s to be still active (a call
// the runtime refused, such as 900 or 908, left it so; msgAndArgs says
// which) and ends it on its own thread, destroying its graph.
func EndActiveCapture(t testing.TB, d driver.Driver, s driver.Stream, msgAndArgs ...any) {
	t.Helper()
	st, err := d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, driver.CaptureActive, st, msgAndArgs...)
	g, err := d.EndCapture(s)
	require.NoError(t, err, "ended on the beginning thread")
	require.NoError(t, d.GraphDestroy(g))
}

// Env is a getenv that reads m (Search.Candidates', Loader.Load's), so a
// test sets the search's variables without touching the process's.
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// UnavailableNamesEveryPath plants a file that is not a library where l's
// search looks first under the toolkit's root ($HomeEnv/HomeSub, the
// second soname) and requires a search given only that root to fail as
// unavailable, naming every candidate, the file with dlopen's reason, and
// the override variable. Where the search succeeds (a usable runtime is
// installed here) the test is skipped.
func UnavailableNamesEveryPath[R any](t *testing.T, l *gpurt.Loader[R]) {
	s := l.Search
	home := filepath.Join(t.TempDir(), "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, s.HomeSub), 0o755))
	bad := filepath.Join(home, s.HomeSub, s.Sonames[1])
	require.NoError(t, os.WriteFile(bad, []byte(strings.Repeat("not an ELF file\n", 64)), 0o644))
	getenv := Env(map[string]string{s.HomeEnv: home})
	_, err := l.Load(getenv, nil)
	if err == nil {
		t.Skipf("a usable %s runtime is installed here: the search found it", s.Product)
	}
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	for _, p := range s.Candidates(getenv) {
		require.Contains(t, err.Error(), p)
	}
	require.Contains(t, err.Error(), bad+": ")
	require.Contains(t, err.Error(), "invalid ELF header", "dlopen's reason is kept")
	require.Contains(t, err.Error(), s.LibEnv, "the message says how to point at a library")
}

// RealRuntime is the real runtime library at $env, for the tests of what
// it answers on a machine without a GPU; where env is not set the test is
// skipped, saying what .ci/run sets it to (where).
func RealRuntime(t testing.TB, env, where string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Skipf("%s is not set (.ci/run sets it to %s)", env, where)
	}
	return path
}
