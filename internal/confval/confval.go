// Package confval reads the values of configuration strings, the same way
// for backend options (driver.Options) and allocator options
// (alloc.ParseOptions), so "8GiB" or "True" means one thing everywhere. It
// sits below alloc/driver and imports nothing of the module: its errors
// carry no sentinel, and the caller wraps the one its contract names.
package confval

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
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
// into the k of a unit. The error says what is wrong with s; it wraps no
// sentinel (backends.ParseBytes wraps driver.ErrInvalidValue).
func Bytes(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return 0, fmt.Errorf("%q is not a byte size (not ASCII)", s)
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
		return 0, fmt.Errorf("%q is not a byte size", s)
	}
	if n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("byte size %q is negative or too large", s)
	}
	return n * mult, nil
}

// BoolForms is every form Bool reads, for the error that refuses another.
const BoolForms = "true|false (any case; also 1|0, t|f, yes|no, on|off)"

// Bool reads true (1, t, true, yes, on) or false (0, f, false, no, off),
// any case, so PyTorch's True and False read too; ok is false for
// anything else. An error refusing a value says BoolForms.
func Bool(s string) (v, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "yes", "on":
		return true, true
	case "0", "f", "false", "no", "off":
		return false, true
	}
	return false, false
}

// Suggest returns the entry of known that name most likely misspells, or
// "" when none is close: one equal but for case, else the nearest within
// one edit for names of up to four letters and two for longer ones (an
// edit: a letter inserted, deleted, changed, or two neighbours swapped, so
// "cdua" is one edit from "cuda").
func Suggest(name string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return k
		}
	}
	limit := 1
	if len(name) > 4 {
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b
// (Levenshtein's, with a swap of neighbours counted as one edit), over
// bytes.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
