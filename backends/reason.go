package backends

import (
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
)

// A skipped choice's reason, as the chain's error and its fallback warning
// say it: without the "backend unavailable" the error around it says
// already, and, in the log, on one line.

// reason is a skipped choice's error with the sentinel's text taken out;
// it still matches everything the error does.
type reason struct{ err error }

func (r reason) Error() string {
	return strings.ReplaceAll(r.err.Error(), driver.ErrBackendUnavailable.Error()+": ", "")
}

func (r reason) Unwrap() error { return r.err }

// oneLine joins a multi-line text (a library search's list of paths, one
// a line) into one line: a line ending in ":" runs on, the others are
// separated by "; ".
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if i > 0 && b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}
