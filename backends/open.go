package backends

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Skipped is a choice of a fallback chain that did not open, and why.
type Skipped struct {
	Choice Choice
	Err    error
}

// Opened is the result of Config.Open: the driver of the first choice that opened,
// which choice it was, and why each earlier one was skipped.
type Opened struct {
	Driver  driver.Driver
	Choice  Choice
	Skipped []Skipped
}

// Report says in one line which backend was opened and why earlier ones
// were not, for an engine's startup log.
func (o *Opened) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %s", o.Choice)
	for _, s := range o.Skipped {
		fmt.Fprintf(&b, "; skipped %s: %v", s.Choice.Name, s.Err)
	}
	return b.String()
}

// Open tries the choices of cfg in order and returns the first that opens.
//
// A choice that fails because it is unavailable here (library or device
// missing, name not linked into this binary, plugin failed to start) is
// skipped and recorded in Opened.Skipped. A config error (ErrInvalidConfig:
// an unknown option, a bad value) stops the chain at once, since silently
// running on another backend would hide the typo. So does a choice refused
// because a Global-mode capture is active (driver.ErrCaptureIllegalOp: the
// device exists, and opening it would invalidate the capture): falling back
// to another backend for that would be a surprise; retry after the
// capture. When nothing opens, the
// error wraps driver.ErrBackendUnavailable and every choice's reason.
//
// A fallback is logged once, as a slog warning (slog.Default) naming each
// choice that failed and why. In strict mode ($CAPALLOC_STRICT true, or a
// chain element "strict", as in "strict;cuda;cpu") there is no fallback:
// the first choice's failure is the error, wrapping its reason (such as
// ErrUnknownBackend for "cdua;cpu").
func (cfg Config) Open(ctx context.Context) (*Opened, error) {
	strict, choices, err := cfg.strictMode()
	if err != nil {
		return nil, err
	}
	if len(choices) == 0 {
		return nil, fmt.Errorf("%w: empty backend config", ErrInvalidConfig)
	}
	var skipped []Skipped
	for i, c := range choices {
		d, err := c.Open(ctx)
		if err == nil {
			o := &Opened{Driver: d, Choice: c, Skipped: skipped}
			if len(skipped) > 0 {
				warnFallback(o)
			}
			return o, nil
		}
		if isConfigError(err) || errors.Is(err, driver.ErrCaptureIllegalOp) || ctx.Err() != nil {
			return nil, fmt.Errorf("backends: open %s: %w", c, err)
		}
		if strict && i+1 < len(choices) {
			return nil, fmt.Errorf("backends: open %s: %w (strict mode: not falling back to %s)", c, err, choices[i+1:])
		}
		skipped = append(skipped, Skipped{Choice: c, Err: err})
	}
	errs := make([]error, len(skipped))
	for i, s := range skipped {
		errs[i] = fmt.Errorf("%s: %w", s.Choice.Name, reason{s.Err})
	}
	return nil, fmt.Errorf("%w: no backend of %q opened: %w", driver.ErrBackendUnavailable, cfg.String(), errors.Join(errs...))
}

// OpenString parses s (see ParseConfig) and opens it as Config.Open does.
func OpenString(ctx context.Context, s string) (*Opened, error) {
	cfg, err := ParseConfig(s)
	if err != nil {
		return nil, err
	}
	return cfg.Open(ctx)
}

// FromEnv opens the chain in $CAPALLOC_BACKEND, or def when it is unset or
// empty.
func FromEnv(ctx context.Context, def string) (*Opened, error) {
	s := os.Getenv(EnvVar)
	if strings.TrimSpace(s) == "" {
		s = def
	}
	return OpenString(ctx, s)
}
