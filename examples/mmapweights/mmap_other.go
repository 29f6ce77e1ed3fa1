//go:build !linux

package main

import (
	"errors"
	"fmt"
	"runtime"
)

// errNoMmap is why the command does not run here.
var errNoMmap = fmt.Errorf("%w: mapping the weights file needs Linux (syscall.Mmap, MAP_SHARED); this is %s", errors.ErrUnsupported, runtime.GOOS)

func mapFile(path string, n int) ([]byte, func() error, error) { return nil, nil, errNoMmap }
