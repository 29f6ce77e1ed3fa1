package driver

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/capalloc/capalloc/internal/confval"
)

// ErrInvalidConfig is a config string or option that cannot be used: a
// syntax error, an unknown option, a value of the wrong kind. It also
// matches ErrInvalidValue. A fallback chain (backends.Config.Open) never
// falls back past it: a typo is the user's to fix, not a reason to run on
// another backend.
var ErrInvalidConfig error = configError{}

// configError is ErrInvalidConfig: its own message, matching
// ErrInvalidValue too, so a wrapped error reads "invalid backend config:
// …" once rather than "invalid value: invalid backend config: …".
type configError struct{}

func (configError) Error() string { return "invalid backend config" }

func (configError) Is(target error) bool { return target == ErrInvalidValue }

// Options are one backend's settings, as "key=value" pairs (from a config
// string, or built in Go), handed to its Opener. Keys are
// lower_snake_case. The typed getters return an error wrapping
// ErrInvalidConfig that names the key and the bad value; an Opener calls
// Check with the keys it knows, so a typo is an error instead of a
// silently ignored setting.
type Options map[string]string

// Get returns the value of key, or def when it is not set.
func (o Options) Get(key, def string) string {
	if v, ok := o[key]; ok {
		return v
	}
	return def
}

// Int parses key as a decimal integer.
func (o Options) Int(key string, def int) (int, error) {
	return parsed(o, key, def, "an integer", func(v string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil
	})
}

// Bool parses key as true/false (also 1/0, yes/no, on/off, any case).
func (o Options) Bool(key string, def bool) (bool, error) {
	return parsed(o, key, def, confval.BoolForms, confval.Bool)
}

// CaptureSafety reads the capture_safety option every backend takes
// (strict or documented: docs/capture-safety.md); SafetyUnset when it is
// not set, leaving the driver's classification of the device.
func (o Options) CaptureSafety() (CaptureSafety, error) {
	return parsed(o, "capture_safety", SafetyUnset, "strict or documented", func(v string) (CaptureSafety, bool) {
		s, err := ParseCaptureSafety(strings.ToLower(strings.TrimSpace(v)))
		return s, err == nil
	})
}

// Duration parses key with time.ParseDuration ("250ms", "5s").
func (o Options) Duration(key string, def time.Duration) (time.Duration, error) {
	return parsed(o, key, def, "a non-negative duration such as 500ms or 5s", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		return d, err == nil && d >= 0
	})
}

// Bytes parses key as a byte count: a plain number, or one with a binary
// (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB) suffix; "8GiB", "512m"
// (single letters are binary, as in most tools), "1024".
func (o Options) Bytes(key string, def int64) (int64, error) {
	return parsed(o, key, def, "a byte size such as 8GiB, 512MiB or 1048576", func(v string) (int64, bool) {
		n, err := confval.Bytes(v)
		return n, err == nil
	})
}

// parsed is the typed getters' rule: def when key is not set, else its
// value read by parse, or def and an error (o.bad) saying want when parse
// refuses it.
func parsed[T any](o Options, key string, def T, want string, parse func(string) (T, bool)) (T, error) {
	v, ok := o[key]
	if !ok {
		return def, nil
	}
	x, ok := parse(v)
	if !ok {
		return def, o.bad(key, want)
	}
	return x, nil
}

// Check fails, with an error wrapping ErrInvalidConfig that lists the known
// keys, when o holds a key that is not among them.
func (o Options) Check(known ...string) error {
	var unknown []string
	for k := range o {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	k := append([]string(nil), known...)
	sort.Strings(k)
	return fmt.Errorf("%w: unknown option %s (known: %s)", ErrInvalidConfig, strings.Join(unknown, ", "), strings.Join(k, ", "))
}

// String renders o as "k=v,k=v" with sorted keys, the form
// backends.ParseConfig reads.
func (o Options) String() string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + o[k]
	}
	return strings.Join(parts, ",")
}

// Clone returns a copy that can be changed without touching o.
func (o Options) Clone() Options {
	c := make(Options, len(o))
	for k, v := range o {
		c[k] = v
	}
	return c
}

// bad is the error for option key's value; want says what is accepted (the
// parser's own error would only say it again).
func (o Options) bad(key, want string) error {
	return fmt.Errorf("%w: option %s=%q: want %s", ErrInvalidConfig, key, o[key], want)
}

// HostMemory supplies the memory a backend's HostAlloc hands out and takes
// it back at HostFree. The plugin server passes one backed by shared memory
// (memfd), so pinned host buffers are visible to the engine's process and
// async copies never carry bytes over RPC. A backend that must pin memory
// itself (CUDA, HIP) registers what Alloc returns (cudaHostRegister) rather
// than allocating its own.
type HostMemory interface {
	// Alloc returns size bytes of zeroed memory.
	Alloc(size int64) ([]byte, error)
	// Free releases a slice Alloc returned, passed exactly as returned.
	Free(b []byte) error
}

// DeviceMemory supplies the memory behind a backend's device allocations,
// with HostMemory's contract (Alloc returns zeroed memory, Free takes it
// back exactly as returned). Only a backend whose device memory is host
// memory (cpu) can take it. The plugin server passes one backed by shared
// memory (memfd), so the engine's process can read and write device bytes
// itself: a pageable blocking copy is then one memcpy instead of two.
type DeviceMemory = HostMemory

// Memory holds the suppliers a program may hand a backend along with its
// options (backends.Choice.Memory); nil fields mean the backend's own
// memory. They are objects, not strings, so a config string never carries
// them.
type Memory struct {
	Host   HostMemory
	Device DeviceMemory
}
