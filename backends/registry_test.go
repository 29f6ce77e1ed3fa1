package backends_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu"
)

var ctx = context.Background()

func TestUnknownBackendListsKnownOnes(t *testing.T) {
	_, err := backends.OpenDriver(ctx, "no-such-gpu")
	require.ErrorIs(t, err, backends.ErrUnknownBackend)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "cpu")
	require.Contains(t, err.Error(), "no-such-gpu")
}

func TestCPURegisteredAndOpensWithOptions(t *testing.T) {
	require.Contains(t, backends.Names(), "cpu")
	d, err := backends.OpenDriver(ctx, "cpu:memory_limit=64MiB")
	require.NoError(t, err)
	require.Equal(t, "cpu", d.Name())
	require.Equal(t, int64(64<<20), d.Info().TotalMemory)
	require.NoError(t, d.Close())

	d, err = backends.OpenDriver(ctx, "cpu:no_capture=true")
	require.NoError(t, err)
	s, err := d.CreateStream()
	require.NoError(t, err)
	require.ErrorIs(t, d.BeginCapture(s, alloc.Global), driver.ErrCaptureUnavailable)
	require.NoError(t, d.Close())
}

func TestCPURejectsBadOptions(t *testing.T) {
	for _, s := range []string{"cpu:memroy_limit=1GiB", "cpu:memory_limit=lots", "cpu:no_capture=maybe", "cpu:memory_limit=-5"} {
		_, err := backends.OpenDriver(ctx, s)
		require.ErrorIs(t, err, backends.ErrInvalidConfig, s)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, s)
	}
	_, err := backends.OpenDriver(ctx, "cpu:memroy_limit=1GiB")
	require.Contains(t, err.Error(), "memory_limit", "the error lists the known options")
	// Each part of the message is said once.
	_, err = backends.OpenDriver(ctx, "cpu:memory_limit=lots")
	require.Equal(t, `invalid backend config: option memory_limit="lots": want a byte size such as 8GiB, 512MiB or 1048576`, err.Error())
}

func TestRegisterRejectsDuplicatesAndBadNames(t *testing.T) {
	f := func(context.Context, driver.Options, driver.Memory) (driver.Driver, error) { return nil, nil }
	require.Panics(t, func() { driver.Register("cpu", f) }, "cpu registered itself")
	require.Panics(t, func() { driver.Register("a:b", f) })
	require.Panics(t, func() { driver.Register("", f) })
	require.Panics(t, func() { driver.Register("x-nil", nil) })
}

func TestParseConfig(t *testing.T) {
	cfg, err := backends.ParseConfig(" cuda:device=0, release_threshold=8GiB ; plugin:cpu ;plugin:/opt/bin/p:memory_limit=1GiB; cpu ")
	require.NoError(t, err)
	require.Equal(t, backends.Config{
		{Name: "cuda", Options: backends.Options{"device": "0", "release_threshold": "8GiB"}},
		{Name: "plugin:cpu", Options: backends.Options{}},
		{Name: "plugin:/opt/bin/p", Options: backends.Options{"memory_limit": "1GiB"}},
		{Name: "cpu", Options: backends.Options{}},
	}, cfg)
	again, err := backends.ParseConfig(cfg.String())
	require.NoError(t, err)
	require.Equal(t, cfg, again, "String is read back by ParseConfig")

	for _, bad := range []string{"", " ; ", ":a=1", "cpu:a=1,b", "cpu:a=1,a=2", "plugin:", ":cpu", "cpu:=1"} {
		_, err := backends.ParseConfig(bad)
		require.ErrorIs(t, err, backends.ErrInvalidConfig, "%q", bad)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"1024": 1024, "8GiB": 8 << 30, "512MiB": 512 << 20, "4k": 4 << 10, "2GB": 2e9, "3 MiB": 3 << 20, "0": 0, "7b": 7,
	} {
		got, err := backends.ParseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "GiB", "1.5GiB", "-1", "99999999999TiB", "12 parsecs",
		"1\u212a", "1KİB", "1\u212aiB", "\u00a01k", "1\xffk"} { // a Kelvin sign lower-cases to k
		_, err := backends.ParseBytes(bad)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, bad)
	}
}

// registerFake registers a backend under a fresh name that fails with err
// (or opens cpu when err is nil) and counts its opens.
func registerFake(t *testing.T, err error) (string, *atomic.Int32) {
	var n atomic.Int32
	name := fmt.Sprintf("fake-%s-%p", t.Name(), &n)
	driver.Register(name, func(ctx context.Context, o driver.Options, _ driver.Memory) (driver.Driver, error) {
		n.Add(1)
		if err != nil {
			return nil, err
		}
		return backends.Choice{Name: "cpu", Options: o}.Open(ctx)
	})
	return name, &n
}

func TestFallbackSaysWhichOpenedAndWhy(t *testing.T) {
	missing, _ := registerFake(t, fmt.Errorf("%w: libfake.so not found in /nowhere", driver.ErrBackendUnavailable))
	broken, _ := registerFake(t, fmt.Errorf("%w: device fell off the bus", driver.ErrDriver))
	ok, _ := registerFake(t, nil)
	never, calls := registerFake(t, nil)

	o, err := backends.OpenString(ctx, missing+";not-linked;"+broken+";"+ok+":memory_limit=1MiB;"+never)
	require.NoError(t, err)
	defer o.Driver.Close()
	require.Equal(t, ok, o.Choice.Name)
	require.Equal(t, int64(1<<20), o.Driver.Info().TotalMemory, "the winner got its options")
	require.Len(t, o.Skipped, 3)
	require.ErrorIs(t, o.Skipped[0].Err, driver.ErrBackendUnavailable)
	require.ErrorIs(t, o.Skipped[1].Err, backends.ErrUnknownBackend)
	require.ErrorIs(t, o.Skipped[2].Err, driver.ErrDriver)
	require.Contains(t, o.Report(), "libfake.so")
	require.Contains(t, o.Report(), "fell off the bus")
	require.Zero(t, calls.Load(), "choices after the winner are not opened")
}

func TestFallbackStopsAtConfigError(t *testing.T) {
	ok, calls := registerFake(t, nil)
	_, err := backends.OpenString(ctx, "cpu:memroy_limit=1GiB;"+ok)
	require.ErrorIs(t, err, backends.ErrInvalidConfig)
	require.Zero(t, calls.Load(), "a typo is not a reason to run somewhere else")
}

func TestFallbackAllFailJoinsReasons(t *testing.T) {
	a, _ := registerFake(t, fmt.Errorf("%w: reason-a", driver.ErrBackendUnavailable))
	b, _ := registerFake(t, fmt.Errorf("%w: reason-b", driver.ErrBackendUnavailable))
	_, err := backends.OpenString(ctx, a+";"+b)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "reason-a")
	require.Contains(t, err.Error(), "reason-b")
}

func TestOpenHonoursCancelledContext(t *testing.T) {
	c, cancel := context.WithCancel(ctx)
	cancel()
	_, err := backends.OpenString(c, "cpu")
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

func TestFromEnv(t *testing.T) {
	t.Setenv(backends.EnvVar, "not-linked;cpu:memory_limit=2MiB")
	o, err := backends.FromEnv(ctx, "cuda")
	require.NoError(t, err)
	defer o.Driver.Close()
	require.Equal(t, "cpu", o.Choice.Name)
	require.Equal(t, int64(2<<20), o.Driver.Info().TotalMemory)

	t.Setenv(backends.EnvVar, "")
	o2, err := backends.FromEnv(ctx, "cpu")
	require.NoError(t, err)
	require.NoError(t, o2.Driver.Close())
}

func TestUnknownScheme(t *testing.T) {
	_, err := backends.OpenDriver(ctx, "teleport:cpu")
	require.ErrorIs(t, err, backends.ErrUnknownBackend)
}

func TestSurveySaysWhatOpensAndWhyNot(t *testing.T) {
	missing, _ := registerFake(t, fmt.Errorf("%w: libfake.so not found in /nowhere", driver.ErrBackendUnavailable))
	broken, _ := registerFake(t, fmt.Errorf("%w: device fell off the bus", driver.ErrDriver))
	got := map[string]error{}
	for _, av := range backends.Survey(ctx, "cpu") {
		got[av.Name] = av.Err
	}
	require.Contains(t, got, "cpu")
	require.NoError(t, got["cpu"])
	require.ErrorIs(t, got[missing], driver.ErrBackendUnavailable)
	require.ErrorIs(t, got[broken], driver.ErrBackendUnavailable, "any failure to open means unavailable here")
	require.ErrorIs(t, got[broken], driver.ErrDriver, "and keeps its cause")
	require.NotContains(t, got, "plugin:cpu", "no scheme is registered in this binary")
	require.NoError(t, backends.Choice{Name: "cpu"}.Available(ctx))
}
