//go:build !linux

package plugin

import (
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc/driver"
)

// childSysProcAttr: no Pdeathsig outside Linux (plugin mode is refused
// there before a child is started).
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// Plugin mode is refused outside Linux before a child is started; these
// only keep the package building there.

func pidfdOpen(int) int   { return -1 }
func pidfdAlive(int) bool { return false }

var errUnsafeRegion = fmt.Errorf("%w: plugin: shared regions need Linux, not %s", driver.ErrDriver, runtime.GOOS)

func checkRegionFile(int, *unix.Stat_t, int64) error { return errUnsafeRegion }
