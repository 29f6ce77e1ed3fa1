package hip

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu" // the fallback of TestChainFallsBackWithoutDevice
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(backends.Options{
		"device": "1", "release_threshold": "8GiB", "reserve": "512MiB",
		"default_pool": "false", "stream_priority": "-1", "non_blocking": "no",
		"no_capture": "true", "ipc": "true",
	})
	require.NoError(t, err)
	require.Equal(t, Options{Device: 1, ReleaseThreshold: 8 << 30, Reserve: 512 << 20, StreamPriority: -1, Blocking: true, NoCapture: true, IPC: true}, o)
	o, err = parseOptions(backends.Options{"default_pool": "true"})
	require.NoError(t, err)
	require.Equal(t, Options{DefaultPool: true}, o)
	o, err = parseOptions(backends.Options{})
	require.NoError(t, err)
	require.Equal(t, Options{}, o, "the default: non-blocking streams, capture on, no IPC")
	require.Equal(t, DefaultReleaseThreshold, o.core().Threshold())

	// The whole table of refusals is gpurt.ParseOptions's test; these show
	// this package's parse is wired to it, and to validation.
	for name, bad := range map[string]backends.Options{
		"unknown key":         {"devcie": "0"},
		"negative device":     {"device": "-1"},
		"no_capture not bool": {"no_capture": "sometimes"},
		"reserve > threshold": {"reserve": "2GiB", "release_threshold": "1GiB"},
	} {
		_, err := parseOptions(bad)
		require.ErrorIs(t, err, backends.ErrInvalidConfig, name)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
	}
}

// A config error stops a fallback chain before any library is loaded.
func TestRegisteredBackendRejectsBadOptions(t *testing.T) {
	_, err := backends.OpenString(t.Context(), "hip:device=x;cpu")
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
}

// hip;cpu on a machine where hip cannot open falls back to cpu and says
// why hip was skipped.
func TestChainFallsBackWithoutDevice(t *testing.T) {
	t.Setenv("FAKE_HIP_DEVICES", "0")
	fake.Lib(t)
	o, err := backends.OpenString(t.Context(), "hip;cpu")
	require.NoError(t, err)
	defer o.Driver.Close()
	require.Equal(t, "cpu", o.Driver.Name())
	require.Contains(t, o.Report(), "skipped hip: backend unavailable: hip:")
	require.Contains(t, o.Report(), "no device (hipErrorNoDevice, 100)")
}
