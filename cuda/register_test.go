package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(backends.Options{
		"device": "1", "release_threshold": "8GiB", "reserve": "512MiB",
		"default_pool": "true", "stream_priority": "-1", "non_blocking": "no",
	})
	require.NoError(t, err)
	require.Equal(t, Options{Device: 1, ReleaseThreshold: 8 << 30, Reserve: 512 << 20, DefaultPool: true, StreamPriority: -1, Blocking: true}, o)
	o, err = parseOptions(backends.Options{"ipc": "true"})
	require.NoError(t, err)
	require.Equal(t, Options{IPC: true}, o)
	o, err = parseOptions(backends.Options{})
	require.NoError(t, err)
	require.Equal(t, Options{}, o, "the default is non-blocking streams: Blocking's zero value")
	o, err = parseOptions(backends.Options{"non_blocking": "true"})
	require.NoError(t, err)
	require.False(t, o.Blocking)
	require.Equal(t, DefaultReleaseThreshold, o.Threshold())

	// The whole table of refusals is gpurt.ParseOptions's test; these show
	// this package's parse is wired to it, and to validation.
	for name, bad := range map[string]backends.Options{
		"unknown key":         {"devcie": "0"},
		"negative device":     {"device": "-1"},
		"reserve > threshold": {"reserve": "2GiB", "release_threshold": "1GiB"},
	} {
		_, err := parseOptions(bad)
		require.ErrorIs(t, err, backends.ErrInvalidConfig, name)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
	}
}

// A config error stops a fallback chain before any library is loaded.
func TestRegisteredBackendRejectsBadOptions(t *testing.T) {
	_, err := backends.OpenString(t.Context(), "cuda:device=x;cpu")
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
}
