//go:build !linux

package plugin

import (
	"fmt"
	"runtime"

	"github.com/capalloc/capalloc/alloc/driver"
)

// newRegion needs memfd_create, which only Linux has; plugin mode is
// refused before it is ever reached (errNotLinux).
func newRegion(id uint64, size int64) (*region, error) {
	return nil, fmt.Errorf("%w: plugin: shared memory regions are memfds, which %s lacks", driver.ErrBackendUnavailable, runtime.GOOS)
}
