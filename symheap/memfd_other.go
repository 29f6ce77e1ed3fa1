//go:build !linux

package symheap

import (
	"fmt"
	"os"
	"runtime"

	"github.com/capalloc/capalloc/alloc/driver"
)

func newSharedFile(string, int64) (*os.File, error) {
	return nil, fmt.Errorf("%w: symheap: shared heaps are memfds, which %s lacks", driver.ErrBackendUnavailable, runtime.GOOS)
}

func mapShared(*os.File, int64) ([]byte, error) {
	return nil, fmt.Errorf("%w: symheap: no memfd on %s", driver.ErrBackendUnavailable, runtime.GOOS)
}

func unmapShared([]byte) error { return nil }

func checkSealed(*os.File) error { return nil }
