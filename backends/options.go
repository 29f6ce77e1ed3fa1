package backends

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/confval"
)

// Options are one backend's settings, as "key=value" pairs: the type a
// backend's opener reads (driver.Options, with its typed getters and
// Check), named here for programs that build a Choice in Go.
type Options = driver.Options

// ParseBytes reads a byte size as Options.Bytes does (internal/confval:
// the same reading as alloc.ParseOptions's sizes). Errors wrap
// driver.ErrInvalidValue.
func ParseBytes(s string) (int64, error) {
	n, err := confval.Bytes(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", driver.ErrInvalidValue, err)
	}
	return n, nil
}
