package backends_test

import (
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// ParseConfig never panics; what it accepts names a backend in every
// choice and reads back the same from its String. Seeds: the f.Add calls
// and testdata/fuzz/FuzzParseConfig.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"cpu", "cuda:device=0,release_threshold=8GiB;plugin:cpu;cpu", "plugin:/opt/p:plugin.backend=cpu",
		" ; ", "cpu:a=1,a=2", "plugin:", "a:b=c:d", "x:=1", "cpu:a= b ,c=d=e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := backends.ParseConfig(s)
		if err != nil {
			require.ErrorIs(t, err, backends.ErrInvalidConfig)
			return
		}
		require.NotEmpty(t, cfg)
		for _, c := range cfg {
			require.NotEmpty(t, c.Name)
		}
		again, err := backends.ParseConfig(cfg.String())
		require.NoError(t, err, "String of %q is %q", s, cfg.String())
		require.Equal(t, cfg, again, "String of %q is %q", s, cfg.String())
	})
}

// ParseBytes agrees with a reference written another way (big integers,
// an explicit unit table, ASCII only). Seeds: the f.Add calls and
// testdata/fuzz/FuzzParseBytes.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1024", "8GiB", " 3 MiB ", "7b", "1\u212a", "1KİB", "9223372036854775807", "8589934592GiB", "-1", "+5k", "0x10"} {
		f.Add(s)
	}
	units := map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1e3, "m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9, "t": 1 << 40, "tib": 1 << 40, "tb": 1e12}
	reference := func(s string) (int64, bool) {
		for _, r := range s {
			if r >= 0x80 {
				return 0, false
			}
		}
		t := strings.TrimSpace(s)
		i := 0
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		j := i
		for j < len(t) && '0' <= t[j] && t[j] <= '9' {
			j++
		}
		if j == i {
			return 0, false
		}
		mult, ok := units[strings.ToLower(strings.TrimSpace(t[j:]))]
		if !ok {
			return 0, false
		}
		n, _ := new(big.Int).SetString(t[:j], 10)
		if n.Sign() < 0 {
			return 0, n.Sign() == 0
		}
		n.Mul(n, big.NewInt(mult))
		if !n.IsInt64() {
			return 0, false
		}
		return n.Int64(), true
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := backends.ParseBytes(s)
		want, ok := reference(s)
		if !ok {
			require.ErrorIs(t, err, alloc.ErrInvalidValue, "%q: got %d", s, got)
			return
		}
		require.NoError(t, err, "%q", s)
		require.Equal(t, want, got, "%q", s)
		require.LessOrEqual(t, got, int64(math.MaxInt64))
	})
}
