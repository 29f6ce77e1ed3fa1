package backends

import (
	"errors"
	"fmt"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrInvalidConfig is a config string or option that cannot be used
// (driver.ErrInvalidConfig, the same value: a backend's opener returns it).
// It also matches driver.ErrInvalidValue. Open never falls back past it: a
// typo is the user's to fix, not a reason to run on another backend.
var ErrInvalidConfig = driver.ErrInvalidConfig

// EnvVar is the environment variable FromEnv reads.
const EnvVar = "CAPALLOC_BACKEND"

// Choice is one backend with its options.
//
// Name is a registered name ("cpu", "cuda") or a scheme and target
// ("plugin:cpu", "plugin:/opt/capalloc/capalloc-plugin").
type Choice struct {
	Name    string
	Options Options
	// Memory, set by a program rather than parsed from a config, supplies
	// the backend's host or device memory (the plugin server's shared
	// memory); the zero value means the backend's own.
	Memory Memory
}

// String renders c as ParseConfig reads it: "name" or "name:k=v,k=v".
func (c Choice) String() string {
	if len(c.Options) == 0 {
		return c.Name
	}
	return c.Name + ":" + c.Options.String()
}

// Scheme splits "plugin:cpu" into ("plugin", "cpu"); a plain name has no
// scheme.
func (c Choice) Scheme() (scheme, target string, ok bool) {
	return strings.Cut(c.Name, ":")
}

// Config is a fallback chain: Open tries each choice in order and the first
// that opens wins.
type Config []Choice

// String renders cfg in the form ParseConfig reads.
func (cfg Config) String() string {
	parts := make([]string, len(cfg))
	for i, c := range cfg {
		parts[i] = c.String()
	}
	return strings.Join(parts, ";")
}

// ParseConfig reads the string form, made to sit in an environment variable:
//
//	cuda:device=0,release_threshold=8GiB;plugin:cpu;cpu
//
// Choices are separated by ";" and tried in order. Each is a name, then
// optionally ":" and comma-separated key=value options. A name may itself
// hold ":" (a scheme such as "plugin:cpu", or a path): the options are the
// last ":"-separated part, and only when it contains "=". Spaces around
// every part are ignored. The element "strict" is not a backend but a flag
// of the chain: Config.Open then does not fall back (see Config.Open).
func ParseConfig(s string) (Config, error) {
	var cfg Config
	for _, elem := range strings.Split(s, ";") {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			continue
		}
		c, err := parseChoice(elem)
		if err != nil {
			return nil, err
		}
		cfg = append(cfg, c)
	}
	if len(cfg) == 0 {
		return nil, fmt.Errorf("%w: %q names no backend", ErrInvalidConfig, s)
	}
	return cfg, nil
}

func parseChoice(elem string) (Choice, error) {
	name, opts := elem, ""
	if i := strings.LastIndexByte(elem, ':'); i >= 0 && strings.Contains(elem[i+1:], "=") {
		name, opts = elem[:i], elem[i+1:]
	}
	c := Choice{Name: strings.TrimSpace(name), Options: Options{}}
	if c.Name == "" {
		return Choice{}, fmt.Errorf("%w: %q has options but no backend name", ErrInvalidConfig, elem)
	}
	if c.Name == strictFlag && opts != "" {
		return Choice{}, fmt.Errorf("%w: %q: the chain flag %s takes no options", ErrInvalidConfig, elem, strictFlag)
	}
	if scheme, target, ok := c.Scheme(); ok && (scheme == "" || target == "") {
		return Choice{}, fmt.Errorf("%w: %q: want scheme:target, such as plugin:cpu", ErrInvalidConfig, c.Name)
	}
	for _, kv := range strings.Split(opts, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return Choice{}, fmt.Errorf("%w: %q in %q: want key=value", ErrInvalidConfig, kv, elem)
		}
		if _, dup := c.Options[k]; dup {
			return Choice{}, fmt.Errorf("%w: option %s given twice in %q", ErrInvalidConfig, k, elem)
		}
		c.Options[k] = strings.TrimSpace(v)
	}
	return c, nil
}

// isConfigError reports whether err is the user's to fix rather than a
// reason to try the next backend.
func isConfigError(err error) bool { return errors.Is(err, ErrInvalidConfig) }
