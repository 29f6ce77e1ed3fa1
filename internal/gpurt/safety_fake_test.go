package gpurt_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The driver classifies the device at open (docs/capture-safety.md): the
// fake device has no recorded truth table, so it is strict ("unrecorded"),
// integrated makes it strict too, and the option overrides both; the
// attributes asked are the vendor's.
func TestFakeSafetyProfile(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		open := func(o opts) (gpuDriver, error) {
			if v.name == "cuda" {
				return cuda.New(cuda.Options(o))
			}
			return hip.New(hipOptions(o))
		}
		d, log := gpurttest.Open(t, v.fake, open, opts{})
		info := d.Info()
		require.Equal(t, driver.SafetyStrict, info.CaptureSafety)
		require.Equal(t, "unrecorded", info.Profile)
		require.Equal(t, "0.0", info.ComputeCapability)
		require.False(t, info.Integrated)
		attrs := map[string][]string{"cuda": {"attr=75", "attr=76", "attr=88"}, "hip": {"attr=23", "attr=61", "attr=65"}}[v.name]
		lines := log.Lines()
		for _, a := range attrs {
			require.NotEmpty(t, find(lines, v.prefix+"DeviceGetAttribute", a), "%s not asked", a)
		}
		require.NoError(t, d.Close())

		d, _ = gpurttest.Open(t, v.fake, open, opts{CaptureSafety: driver.SafetyDocumented})
		require.Equal(t, driver.SafetyDocumented, d.Info().CaptureSafety)
		require.Equal(t, "config", d.Info().Profile)
		require.NoError(t, d.Close())

		t.Setenv(v.envPrefix+"INTEGRATED", "1")
		d, _ = gpurttest.Open(t, v.fake, open, opts{})
		require.Equal(t, driver.SafetyStrict, d.Info().CaptureSafety)
		require.Equal(t, "integrated", d.Info().Profile)
		require.True(t, d.Info().Integrated)
		require.NoError(t, d.Close())
	})
}
