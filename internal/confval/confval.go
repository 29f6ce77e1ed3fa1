// Package confval reads the values of configuration strings, the same way
// for backend options (backends.Options) and allocator options
// (alloc.ParseOptions), so "8GiB" or "True" means one thing everywhere.
package confval

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/capalloc/capalloc/alloc/driver"
)

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "GiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Bytes reads a byte count: a plain number, or one with a binary (KiB,
// MiB, GiB, TiB) or decimal (KB, MB, GB, TB) suffix, any case; "8GiB",
// "512m" (single letters are binary, as in most tools), "1024". Only ASCII
// is accepted: lower-casing would otherwise turn a Kelvin sign (U+212A)
// into the k of a unit. Errors wrap driver.ErrInvalidValue.
func Bytes(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return 0, fmt.Errorf("%w: %q is not a byte size (not ASCII)", driver.ErrInvalidValue, s)
		}
	}
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a byte size", driver.ErrInvalidValue, s)
	}
	if n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%w: byte size %q is negative or too large", driver.ErrInvalidValue, s)
	}
	return n * mult, nil
}

// Bool reads true (1, t, true, yes, on) or false (0, f, false, no, off),
// any case, so PyTorch's True and False read too; ok is false for
// anything else.
func Bool(s string) (v, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "yes", "on":
		return true, true
	case "0", "f", "false", "no", "off":
		return false, true
	}
	return false, false
}
