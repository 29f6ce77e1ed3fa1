package gpurt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// The config-string options both drivers take, and what is refused: every
// error wraps backends.ErrInvalidConfig and alloc.ErrInvalidValue (each
// vendor's parseOptions test checks it is wired to this).
func TestParseOptions(t *testing.T) {
	v := &Vendor{Name: "test"}
	o, extra, err := ParseOptions(backends.Options{
		"device": "1", "release_threshold": "8GiB", "reserve": "512MiB",
		"default_pool": "true", "stream_priority": "-1", "non_blocking": "no", "flag": "true",
	}, "flag")
	require.NoError(t, err)
	require.Equal(t, Options{Device: 1, ReleaseThreshold: 8 << 30, Reserve: 512 << 20, DefaultPool: true, StreamPriority: -1, Blocking: true}, o)
	require.Equal(t, map[string]bool{"flag": true}, extra)
	require.NoError(t, v.ValidateConfig(o))
	o, _, err = ParseOptions(backends.Options{"ipc": "true"})
	require.NoError(t, err)
	require.Equal(t, Options{IPC: true}, o)
	o, extra, err = ParseOptions(backends.Options{}, "flag")
	require.NoError(t, err)
	require.Equal(t, Options{}, o, "the default is non-blocking streams: Blocking's zero value")
	require.Equal(t, map[string]bool{"flag": false}, extra)
	require.Equal(t, DefaultReleaseThreshold, o.Threshold())
	o, _, err = ParseOptions(backends.Options{"non_blocking": "true"})
	require.NoError(t, err)
	require.False(t, o.Blocking)

	for name, bad := range map[string]backends.Options{
		"unknown key":         {"devcie": "0"},
		"vendor key unknown":  {"flag": "true"},
		"device not int":      {"device": "gpu0"},
		"negative device":     {"device": "-1"},
		"threshold not bytes": {"release_threshold": "lots"},
		"reserve not bytes":   {"reserve": "-5"},
		"pool not bool":       {"default_pool": "maybe"},
		"priority not int":    {"stream_priority": "high"},
		"blocking not bool":   {"non_blocking": "2"},
		"reserve > threshold": {"reserve": "2GiB", "release_threshold": "1GiB"},
		"ipc not bool":        {"ipc": "yes please"},
		"ipc with default":    {"ipc": "true", "default_pool": "true"},
	} {
		o, _, err := ParseOptions(bad)
		if err == nil {
			err = v.ValidateConfig(o)
		}
		require.ErrorIs(t, err, backends.ErrInvalidConfig, name)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
	}
	_, _, err = ParseOptions(backends.Options{"flag": "sometimes"}, "flag")
	require.ErrorIs(t, err, backends.ErrInvalidConfig, "a vendor key that is not a bool")
}
