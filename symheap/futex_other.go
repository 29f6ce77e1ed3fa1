//go:build !linux

package symheap

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Without futexes (not Linux) a waiter naps briefly instead of sleeping
// until woken: correct, slower.
func futexSleep(w *atomic.Uint32, old uint32, d time.Duration) {
	time.Sleep(min(d, 50*time.Microsecond))
}

func futexWakeAll(*atomic.Uint32) {}

func osYield() { runtime.Gosched() }
