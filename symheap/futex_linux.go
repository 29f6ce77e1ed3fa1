package symheap

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// From include/uapi/linux/futex.h. The shared (not PRIVATE) operations:
// the words live in MAP_SHARED memfd pages that other processes map too.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// futexSleep sleeps while *w == old, for at most d (or until woken; it may
// also return early, spuriously).
func futexSleep(w *atomic.Uint32, old uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(old), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every sleeper on w.
func futexWakeAll(w *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, uintptr(^uint32(0)>>1), 0, 0, 0)
}

// osYield gives the core to another runnable thread, of this process or
// another (sched_yield): runtime.Gosched only reaches goroutines of this
// process.
func osYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
