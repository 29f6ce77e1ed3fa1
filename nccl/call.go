package nccl

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Calls go through gpurt.Call, the runtimes' one hot-call helper. Its
// uintptrescapes directive keeps what pointer arguments point at alive and
// in place, but only for a conversion written in the call's own argument list
// (gpurt.Call(fn, uintptr(unsafe.Pointer(&v)))). A uintptr computed before,
// in a helper, may name a stack slot that moves when the goroutine's stack
// grows on the way to the C call (a fresh goroutine's ncclGetUniqueId
// wrote its id into the old stack).

// ncclResult_t values (nccl.h, "API: Types").
const (
	ncclSuccess            = 0
	ncclUnhandledCudaError = 1
	ncclSystemError        = 2
	ncclInternalError      = 3
	ncclInvalidArgument    = 4
	ncclInvalidUsage       = 5
	ncclRemoteError        = 6
)

// check maps an ncclResult_t to an error wrapping an alloc sentinel, with
// the code and NCCL's own words.
func (l *Library) check(op string, r int32) error {
	if r == ncclSuccess {
		return nil
	}
	sentinel := driver.ErrDriver
	if r == ncclInvalidArgument || r == ncclInvalidUsage {
		sentinel = alloc.ErrInvalidValue
	}
	msg := l.errorString(r)
	return fmt.Errorf("%w: nccl: %s: %s (ncclResult_t %d)", sentinel, op, msg, r)
}
