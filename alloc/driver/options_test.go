package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/confval"
)

// Each typed getter gives the default when its key is not set, the parsed
// value when it is, and for a value it cannot read the default and an
// error wrapping ErrInvalidConfig (and ErrInvalidValue) that names the key,
// the value and what was wanted.
func TestOptionsTypedGetters(t *testing.T) {
	o := driver.Options{
		"n": "42", "flag": "Yes", "capture_safety": "documented", "wait": "250ms", "size": "8GiB",
		"bad_n": "x", "bad_flag": "maybe", "bad_wait": "-1s", "bad_size": "lots",
	}
	n, err := o.Int("n", 7)
	require.NoError(t, err)
	require.Equal(t, 42, n)
	b, err := o.Bool("flag", false)
	require.NoError(t, err)
	require.True(t, b)
	cs, err := o.CaptureSafety()
	require.NoError(t, err)
	require.Equal(t, driver.SafetyDocumented, cs)
	d, err := o.Duration("wait", time.Second)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, d)
	sz, err := o.Bytes("size", 1)
	require.NoError(t, err)
	require.Equal(t, int64(8<<30), sz)

	n, err = o.Int("unset", 7)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	cs, err = driver.Options{}.CaptureSafety()
	require.NoError(t, err)
	require.Equal(t, driver.SafetyUnset, cs)

	for _, c := range []struct {
		get  func() error
		want string
	}{
		{func() error { _, err := o.Int("bad_n", 7); return err }, `option bad_n="x": want an integer`},
		{func() error { _, err := o.Bool("bad_flag", false); return err }, `option bad_flag="maybe": want ` + confval.BoolForms},
		{func() error { _, err := o.Duration("bad_wait", 0); return err }, `option bad_wait="-1s": want a non-negative duration`},
		{func() error { _, err := o.Bytes("bad_size", 0); return err }, `option bad_size="lots": want a byte size`},
		{func() error {
			_, err := driver.Options{"capture_safety": "loose"}.CaptureSafety()
			return err
		}, `option capture_safety="loose": want strict or documented`},
	} {
		err := c.get()
		require.ErrorIs(t, err, driver.ErrInvalidConfig)
		require.ErrorIs(t, err, driver.ErrInvalidValue)
		require.Contains(t, err.Error(), c.want)
	}
	n, _ = o.Int("bad_n", 7)
	require.Equal(t, 7, n, "the default, with the error")
}
