package alloc

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capalloc/capalloc/internal/confval"
)

// Allocator options from configuration: what an engine may change without
// recompiling, read from a string such as
//
//	expandable_segments=true,watchdog=30s,profile_rate=512KiB,name=decode
//
// the way PyTorch reads PYTORCH_CUDA_ALLOC_CONF (its key:value spelling is
// read too). Each key is one row of optionKeys; a new option is one row.

// envAllocConf is the environment variable OptionsFromEnv reads.
const envAllocConf = "CAPALLOC_ALLOC_CONF"

// optionKey is one key of the configuration string.
type optionKey struct {
	name string
	form string // the values it reads, for errors
	// set reads v (trimmed) into p; an error says what is wrong with v,
	// and set leaves p unchanged then.
	set func(p *Options, v string) error
	// format writes p's value in a form set reads back, or "" when p
	// leaves it at its default.
	format func(p Options) string
}

// textKey is a key whose value is UTF-8 text kept as it is, in the
// field field returns.
func textKey(name, form string, field func(*Options) *string) optionKey {
	return optionKey{name, form,
		func(p *Options, v string) error {
			if !utf8.ValidString(v) {
				return fmt.Errorf("not valid UTF-8")
			}
			*field(p) = v
			return nil
		},
		func(p Options) string { return *field(&p) }}
}

var optionKeys = []optionKey{
	{"expandable_segments", confval.BoolForms,
		func(p *Options, v string) error {
			b, ok := confval.Bool(v)
			if !ok {
				return fmt.Errorf("not true or false")
			}
			p.ExpandableSegments = b
			return nil
		},
		func(p Options) string {
			if !p.ExpandableSegments {
				return ""
			}
			return "true"
		}},
	{"gc_threshold", "a fraction of the memory limit in (0, 1), such as 0.8",
		fractionSetter(func(p *Options) *float64 { return &p.GCThreshold }, false),
		fractionFormat(func(p *Options) *float64 { return &p.GCThreshold })},
	{"history", "events kept (0: off) such as 100000, at most " + strconv.Itoa(maxHistory),
		func(p *Options, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("not a non-negative count")
			}
			if n > maxHistory {
				return fmt.Errorf("more than the maximum, %d events", maxHistory)
			}
			p.History = n
			return nil
		},
		func(p Options) string {
			if p.History == 0 {
				return ""
			}
			return strconv.Itoa(p.History)
		}},
	{"host_cache", confval.BoolForms + "; default true",
		func(p *Options, v string) error {
			b, ok := confval.Bool(v)
			if !ok {
				return fmt.Errorf("not true or false")
			}
			p.NoHostCache = !b
			return nil
		},
		func(p Options) string {
			if !p.NoHostCache {
				return ""
			}
			return "false"
		}},
	textKey("history_file", "a path without commas, written at each out-of-memory error",
		func(p *Options) *string { return &p.HistoryFile }),
	{"memory_fraction", "a fraction of the device's total memory in (0, 1], such as 0.9",
		fractionSetter(func(p *Options) *float64 { return &p.MemoryFraction }, true),
		fractionFormat(func(p *Options) *float64 { return &p.MemoryFraction })},
	{"memory_limit", "bytes reserved at most, such as 40GiB (0: none)",
		func(p *Options, v string) error {
			n, err := confval.Bytes(v)
			if err != nil {
				return fmt.Errorf("not a byte count")
			}
			p.MemoryLimit = n
			return nil
		},
		func(p Options) string {
			if p.MemoryLimit == 0 {
				return ""
			}
			return strconv.FormatInt(p.MemoryLimit, 10)
		}},
	textKey("name", "text without commas (empty: the backend's name and a number)",
		func(p *Options) *string { return &p.Name }),
	{"profile_rate", "0 (off), 1 (every allocation) or bytes per sample such as 512KiB",
		func(p *Options, v string) error {
			n, err := confval.Bytes(v)
			if err != nil || n > math.MaxInt {
				return fmt.Errorf("not a byte count")
			}
			p.ProfileRate = int(n)
			if n == 0 {
				p.ProfileRate = -1 // off; Options' zero leaves the rate alone
			}
			return nil
		},
		func(p Options) string {
			switch {
			case p.ProfileRate == 0:
				return ""
			case p.ProfileRate < 0:
				return "0"
			}
			return strconv.Itoa(p.ProfileRate)
		}},
	{"watchdog", "a duration such as 30s or 500ms, 0 (the default, 60s) or off",
		func(p *Options, v string) error {
			if strings.EqualFold(v, "off") {
				p.Watchdog = -1
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("not a non-negative duration")
			}
			p.Watchdog = d
			return nil
		},
		func(p Options) string {
			switch {
			case p.Watchdog < 0:
				return "off"
			case p.Watchdog == 0:
				return ""
			}
			return p.Watchdog.String()
		}},
}

// fractionSetter reads a fraction into the field field returns: in
// (0, 1], or (0, 1) when one is not allowed.
func fractionSetter(field func(*Options) *float64, one bool) func(*Options, string) error {
	return func(p *Options, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && (f < 1 || one && f == 1)) {
			if one {
				return fmt.Errorf("not a fraction in (0, 1]")
			}
			return fmt.Errorf("not a fraction in (0, 1)")
		}
		*field(p) = f
		return nil
	}
}

func fractionFormat(field func(*Options) *float64) func(Options) string {
	return func(p Options) string {
		if f := *field(&p); f != 0 {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return ""
	}
}

// ParseOptions reads allocator options from a configuration string:
// comma-separated key=value pairs (key:value, PyTorch's spelling, too),
// spaces around keys and values ignored, each key at most once:
//
//	expandable_segments  true|false (any case; also 1|0, t|f, yes|no, on|off): Options.ExpandableSegments
//	gc_threshold         a fraction of the limit in (0, 1): Options.GCThreshold
//	history              events kept (0: off), at most 4194304: Options.History
//	host_cache           true|false (as expandable_segments; default true): !Options.NoHostCache
//	history_file         a path: Options.HistoryFile
//	memory_fraction      a fraction of the device's total in (0, 1]: Options.MemoryFraction
//	memory_limit         bytes (40GiB): Options.MemoryLimit
//	name                 text without commas: Options.Name
//	profile_rate         0 (off), 1 or bytes per sample (512KiB): Options.ProfileRate
//	watchdog             a duration (30s), 0 (the default) or off: Options.Watchdog
//
// Sizes read as backend options do ("8GiB", "512KiB", "4096"). The empty
// string is the zero Options. Parsing changes nothing: New applies what
// the Options say. An unknown key, a repeated one or a bad value is an
// *Error wrapping ErrInvalidValue that lists the keys and their forms.
func ParseOptions(s string) (Options, error) {
	return parseNamed("ParseOptions", s, "")
}

// OptionsFromEnv is ParseOptions of the environment variable
// CAPALLOC_ALLOC_CONF (unset or empty: the zero Options), so
//
//	CAPALLOC_ALLOC_CONF=expandable_segments:True,watchdog=2m ./engine
//
// changes an engine that opens its allocator with
// alloc.New(drv, opts) after opts, err := alloc.OptionsFromEnv().
func OptionsFromEnv() (Options, error) {
	return parseNamed("OptionsFromEnv", os.Getenv(envAllocConf), envAllocConf+": ")
}

func parseNamed(op, s, where string) (Options, error) {
	p, err := parseOptions(s)
	if err != nil {
		return Options{}, &Error{Op: op, Size: -1, Err: fmt.Errorf("%w: %s%w", ErrInvalidValue, where, err)}
	}
	return p, nil
}

// parseOptions reads s without applying anything. Its error is the detail
// that parseNamed wraps with ErrInvalidValue.
func parseOptions(s string) (Options, error) {
	var p Options
	seen := make(map[string]bool, len(optionKeys))
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		i := strings.IndexAny(pair, "=:")
		if i < 0 {
			return Options{}, fmt.Errorf("%q: want key=value (known: %s)", strings.TrimSpace(pair), knownOptionKeys())
		}
		k, v := strings.TrimSpace(pair[:i]), strings.TrimSpace(pair[i+1:])
		key := findOptionKey(k)
		if key == nil {
			return Options{}, fmt.Errorf("unknown key %q%s (known: %s)", k, suggestOptionKey(k), knownOptionKeys())
		}
		if seen[k] {
			return Options{}, fmt.Errorf("key %s given twice", k)
		}
		seen[k] = true
		if err := key.set(&p, v); err != nil {
			return Options{}, fmt.Errorf("%s=%q: %v: want %s", k, v, err, key.form)
		}
	}
	return p, nil
}

func findOptionKey(name string) *optionKey {
	for i := range optionKeys {
		if optionKeys[i].name == name {
			return &optionKeys[i]
		}
	}
	return nil
}

// backendOptionKeys are options of the backends (docs/backend-config.md)
// that a configuration string of the allocator's may be given by mistake.
var backendOptionKeys = []string{"capture_safety", "device", "release_threshold"}

// suggestOptionKey is "; did you mean KEY?" when k misspells a key, or
// where k belongs when it is a backend's option.
func suggestOptionKey(k string) string {
	if slices.Contains(backendOptionKeys, k) {
		return "; " + k + " is a backend option: give it in the backend's config string (CAPALLOC_BACKEND=cuda:" + k + "=...)"
	}
	names := make([]string, len(optionKeys))
	for i, key := range optionKeys {
		names[i] = key.name
	}
	if s := confval.Suggest(k, names); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// knownOptionKeys lists the keys and their forms for an error message.
func knownOptionKeys() string {
	parts := make([]string, len(optionKeys))
	for i, k := range optionKeys {
		parts[i] = k.name + "=" + k.form
	}
	return strings.Join(parts, "; ")
}

// formatOptions writes p in the form parseOptions reads back: the keys
// that p sets, in the table's order.
func formatOptions(p Options) string {
	var parts []string
	for _, k := range optionKeys {
		if v := k.format(p); v != "" {
			parts = append(parts, k.name+"="+v)
		}
	}
	return strings.Join(parts, ",")
}
