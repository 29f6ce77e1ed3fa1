package backends

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capalloc/capalloc/internal/confval"
)

// What an unknown backend name is told: the registered names, the name it
// most likely misspells ("cdua": did you mean cuda?), and, for a backend of
// this module that the binary does not link, the import that registers it.

// modulePackages are the packages of this module whose import registers a
// backend name or a scheme.
var modulePackages = map[string]string{
	"cpu":     "github.com/capalloc/capalloc/cpu",
	"cuda":    "github.com/capalloc/capalloc/cuda",
	"hip":     "github.com/capalloc/capalloc/hip",
	"plugin:": "github.com/capalloc/capalloc/backends/plugin",
}

// unknown is the error for a name that no linked package registered: it
// wraps ErrUnknownBackend, says what the name likely meant, and lists the
// known names.
func unknown(name string) error {
	names, schemes := Names(), Schemes()
	known := slices.Clone(names)
	for _, s := range schemes {
		known = append(known, s+":NAME")
	}
	return fmt.Errorf("%w %q%s (known: %s)", ErrUnknownBackend, name, hint(name, names, schemes), strings.Join(known, ", "))
}

// hint is what unknown adds after the name: "; did you mean cuda?", the
// import that registers a module backend, both, or nothing.
func hint(name string, names, schemes []string) string {
	key, rest, linked := name, "", names
	if scheme, target, ok := strings.Cut(name, ":"); ok {
		key, rest, linked = scheme, ":"+target, schemes
	}
	if _, ours := modulePackages[packageKey(key, rest)]; ours {
		return importHint(key, rest, linked)
	}
	// A near miss of a name linked here or of a module backend of the
	// same kind (name or scheme).
	candidates := slices.Clone(linked)
	for k := range modulePackages {
		if name, isScheme := strings.CutSuffix(k, ":"); isScheme == (rest != "") && !slices.Contains(candidates, name) {
			candidates = append(candidates, name)
		}
	}
	slices.Sort(candidates)
	s := confval.Suggest(key, candidates)
	if s == "" {
		return ""
	}
	return "; did you mean " + s + rest + "?" + importHint(s, rest, linked)
}

// packageKey is key's entry in modulePackages: "plugin:" for a scheme.
func packageKey(key, rest string) string {
	if rest != "" {
		return key + ":"
	}
	return key
}

// importHint names the import that registers key (a scheme when rest is
// ":target"), when key is a module backend that this binary does not link.
func importHint(key, rest string, linked []string) string {
	pkg, ok := modulePackages[packageKey(key, rest)]
	if !ok || slices.Contains(linked, key) {
		return ""
	}
	return fmt.Sprintf("; %s%s needs package %s linked into this binary: import _ %q", key, rest, pkg, pkg)
}
