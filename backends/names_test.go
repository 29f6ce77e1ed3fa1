package backends_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// This test binary links cpu only: cuda, hip and backends/plugin are
// module backends it does not import.

func TestUnknownNameSaysWhatItMeant(t *testing.T) {
	linked, _ := registerFake(t, nil)
	swapped := linked[1:2] + linked[:1] + linked[2:] // "afke-…": two letters swapped
	for _, tc := range []struct{ name, says string }{
		{"CPU", `"CPU"; did you mean cpu? (known: `},
		{"cpy", `did you mean cpu?`},
		{"cdua", `did you mean cuda?; cuda needs package github.com/capalloc/capalloc/cuda linked into this binary: import _ "github.com/capalloc/capalloc/cuda"`},
		{"cuda", `"cuda"; cuda needs package github.com/capalloc/capalloc/cuda linked`},
		{"HIP", `did you mean hip?; hip needs package github.com/capalloc/capalloc/hip linked`},
		{swapped, "did you mean " + linked + "?"},
		{"plugin:cpu", `"plugin:cpu"; plugin:cpu needs package github.com/capalloc/capalloc/backends/plugin linked into this binary: import _ "github.com/capalloc/capalloc/backends/plugin"`},
		{"plugn:cuda", `did you mean plugin:cuda?; plugin:cuda needs package github.com/capalloc/capalloc/backends/plugin linked`},
	} {
		_, err := backends.OpenDriver(ctx, tc.name)
		require.ErrorIs(t, err, backends.ErrUnknownBackend, tc.name)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable, tc.name)
		require.Contains(t, err.Error(), tc.says, tc.name)
		require.Contains(t, err.Error(), "(known: ", tc.name)
		require.LessOrEqual(t, strings.Count(err.Error(), "did you mean"), 1, "said once: %v", err)
		require.LessOrEqual(t, strings.Count(err.Error(), "needs package"), 1, "said once: %v", err)
	}
	for _, far := range []string{"xla", "metal", "teleport:cpu", "no-such-gpu"} {
		_, err := backends.OpenDriver(ctx, far)
		require.ErrorIs(t, err, backends.ErrUnknownBackend, far)
		require.NotContains(t, err.Error(), "did you mean", far)
		require.NotContains(t, err.Error(), "needs package", far)
	}
}

// captureLog sends slog.Default to a buffer for the test.
// openClosed opens spec, which must open, and closes the driver it
// opened; what opened is returned.
func openClosed(t *testing.T, spec string, msgAndArgs ...any) *backends.Opened {
	t.Helper()
	o, err := backends.OpenString(ctx, spec)
	require.NoError(t, err, msgAndArgs...)
	require.NoError(t, o.Driver.Close())
	return o
}

func captureLog(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

func TestFallbackLogsOneWarning(t *testing.T) {
	missing, _ := registerFake(t, fmt.Errorf("%w: no GPU in this machine", driver.ErrBackendUnavailable))
	log := captureLog(t)
	o := openClosed(t, missing+";cdua;cpu")
	require.Equal(t, "cpu", o.Choice.Name)
	require.Equal(t, 1, strings.Count(log.String(), "\n"), "one record for the chain: %s", log)
	require.Contains(t, log.String(), "level=WARN")
	require.Contains(t, log.String(), "opened cpu")
	require.Contains(t, log.String(), "failed."+missing+"=\"no GPU in this machine\"", "one attribute per failed choice")
	require.Contains(t, log.String(), "failed.cdua=\"unknown backend")
	require.Contains(t, log.String(), "did you mean cuda?")
	require.NotContains(t, log.String(), "backend unavailable", "the sentinel is the message's, not each reason's")

	log.Reset()
	openClosed(t, "cpu;"+missing)
	require.Empty(t, log.String(), "no fallback, no warning")
}

// A reason of several lines (a library search lists its paths one a line)
// is one line in the warning, with no escaped line break.
func TestFallbackWarningIsOneLinePerChoice(t *testing.T) {
	missing, _ := registerFake(t, fmt.Errorf("%w: fake: no runtime library could be loaded; tried:\n  libfake.so.2: not found\n  /opt/fake/libfake.so: not found", driver.ErrBackendUnavailable))
	log := captureLog(t)
	openClosed(t, missing+";cpu")
	require.Contains(t, log.String(), "failed."+missing+"=\"fake: no runtime library could be loaded; tried: libfake.so.2: not found; /opt/fake/libfake.so: not found\"")
	require.NotContains(t, log.String(), `\n`, "no literal line break")
}

// When no choice opens, the error says "backend unavailable" once, then
// each choice's reason, and still matches each reason's sentinel.
func TestNoBackendSaysUnavailableOnce(t *testing.T) {
	_, err := backends.OpenString(ctx, "CPU")
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.ErrorIs(t, err, backends.ErrUnknownBackend)
	require.Equal(t, 1, strings.Count(err.Error(), "backend unavailable"), err.Error())
	require.Contains(t, err.Error(), `no backend of "CPU" opened: CPU: unknown backend "CPU"; did you mean cpu?`)
}

func TestStrictModeRefusesFallback(t *testing.T) {
	log := captureLog(t)
	ok, calls := registerFake(t, nil)
	missing, _ := registerFake(t, fmt.Errorf("%w: no GPU in this machine", driver.ErrBackendUnavailable))

	t.Setenv(backends.StrictEnvVar, "1")
	_, err := backends.OpenString(ctx, "cdua;"+ok)
	require.ErrorIs(t, err, backends.ErrUnknownBackend, "the first choice's reason")
	require.Contains(t, err.Error(), "did you mean cuda?")
	require.Contains(t, err.Error(), "strict mode: not falling back to "+ok)
	_, err = backends.OpenString(ctx, missing+";"+ok)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "no GPU in this machine")
	require.Zero(t, calls.Load(), "strict mode opens nothing after the first choice")
	openClosed(t, "cpu;"+ok, "strict mode opens a first choice that is there")

	t.Setenv(backends.StrictEnvVar, "maybe")
	_, err = backends.OpenString(ctx, "cpu")
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	require.Contains(t, err.Error(), backends.StrictEnvVar)

	t.Setenv(backends.StrictEnvVar, "0")
	_, err = backends.OpenString(ctx, "strict;cdua;"+ok)
	require.ErrorIs(t, err, backends.ErrUnknownBackend, "the chain's own flag")
	require.Contains(t, err.Error(), "strict mode")
	require.Zero(t, calls.Load())
	openClosed(t, "cdua;"+ok, "false: a fallback")
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, strings.Count(log.String(), "\n"), "the one fallback, one warning; strict refusals are errors: %s", log)
}

func TestStrictFlagIsNotABackend(t *testing.T) {
	cfg, err := backends.ParseConfig("strict; cpu")
	require.NoError(t, err)
	require.Equal(t, "strict;cpu", cfg.String())
	o, err := cfg.Open(ctx)
	require.NoError(t, err)
	require.Equal(t, "cpu", o.Choice.Name)
	require.Empty(t, o.Skipped, "the flag is not a skipped choice")
	require.NoError(t, o.Driver.Close())

	_, err = backends.OpenDriver(ctx, "strict")
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	_, err = backends.OpenString(ctx, "strict")
	require.ErrorIs(t, err, backends.ErrInvalidConfig, "a chain of only the flag is empty")
	_, err = backends.ParseConfig("strict:memory_limit=1GiB;cpu")
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	f := func(context.Context, driver.Options, driver.Memory) (driver.Driver, error) { return nil, nil }
	require.Panics(t, func() { driver.Register("strict", f) }, "the chain's flag cannot name a backend")
}
