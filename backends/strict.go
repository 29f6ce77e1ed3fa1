package backends

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/confval"
)

// Strict mode: a fallback chain that may not fall back. A deployment keeps
// one chain ("cuda;cpu") for laptops and CI, and on the machines where
// running on the CPU would be a failure sets CAPALLOC_STRICT=1 (or puts
// the element "strict" in the chain): then the first choice must open, and
// a typo such as "cdua;cpu" is an error rather than a CPU run.

// StrictEnvVar is the environment variable that turns on strict mode for
// every Config.Open of the process: true (1, true, yes, on) or false (0,
// false, no, off, or unset).
const StrictEnvVar = "CAPALLOC_STRICT"

// strictFlag is the chain element that turns on strict mode for its
// chain ("strict;cuda;cpu"); driver.Register refuses it as a name.
const strictFlag = driver.ReservedName

// strictMode reports whether cfg opens in strict mode, and returns its
// backend choices (cfg without the strict element). A value of
// CAPALLOC_STRICT that is not a boolean is a config error.
func (cfg Config) strictMode() (strict bool, choices Config, err error) {
	if v := os.Getenv(StrictEnvVar); strings.TrimSpace(v) != "" {
		b, ok := confval.Bool(v)
		if !ok {
			return false, nil, fmt.Errorf("%w: %s=%q: want %s", ErrInvalidConfig, StrictEnvVar, v, confval.BoolForms)
		}
		strict = b
	}
	for _, c := range cfg {
		if c.Name == strictFlag {
			strict = true
			continue
		}
		choices = append(choices, c)
	}
	return strict, choices, nil
}

// warnFallback logs, once for the whole chain, that o is not the chain's
// first choice: which choices failed and why.
func warnFallback(o *Opened) {
	failed := make([]any, len(o.Skipped))
	for i, s := range o.Skipped {
		failed[i] = slog.String(s.Choice.Name, oneLine(reason{s.Err}.Error()))
	}
	slog.Warn("capalloc: backend fallback: opened "+o.Choice.Name+" after earlier choices failed (set "+StrictEnvVar+"=1 to make this an error)",
		"opened", o.Choice.String(), slog.Group("failed", failed...))
}
