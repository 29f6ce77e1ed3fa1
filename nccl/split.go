package nccl

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// NoColor is NCCL_SPLIT_NOCOLOR: a rank that splits with it joins no new
// communicator (Split returns nil, nil).
const NoColor = -1

// ErrNoSplit: the library has no ncclCommSplit (NCCL before 2.18). It
// wraps driver.ErrBackendUnavailable.
var ErrNoSplit = fmt.Errorf("%w: nccl: no ncclCommSplit (NCCL 2.18 or later)", driver.ErrBackendUnavailable)

// HasSplit reports whether the library splits communicators.
func (l *Library) HasSplit() bool { return l.commSplit != 0 }

// Split makes a communicator of the ranks of c that pass the same color
// (ncclCommSplit), ordered by key, then by their rank in c: tensor
// parallelism inside a pipeline stage splits by stage. Every rank of c
// calls it (NoColor to join none). The new communicator inherits c's
// configuration (a NULL ncclConfig_t), device and timeout.
//
// Like InitRank it is a device-wide call under alloc's guard: refused
// (driver.ErrCaptureIllegalOp, no NCCL call) during a Global-mode capture
// in the process; it runs on InitRank's device thread, and it is bounded
// by c's timeout (SetTimeout): past it c is aborted and the result is
// ErrCollectiveTimeout. A library without ncclCommSplit is ErrNoSplit.
func (c *Comm) Split(color, key int) (*Comm, error) { return c.splitWith(color, key, nil) }

// SplitConfig is Split with a configuration for the new communicator
// (ncclCommSplit's config, checked before any call: ErrBadConfig). Its
// timeout is cfg's (the parent's when unset); the split itself is bounded
// by the parent's, as Split. Whether the split is polled is the parent's
// mode: NCCL runs it in the parent's background and reports it through
// the parent's ncclCommGetAsyncError, writing the new handle when done.
func (c *Comm) SplitConfig(color, key int, cfg Config) (*Comm, error) {
	return c.splitWith(color, key, &cfg)
}

func (c *Comm) splitWith(color, key int, cfg *Config) (*Comm, error) {
	l := c.l
	if !l.HasSplit() {
		return nil, fmt.Errorf("%w: %s is %s %s", ErrNoSplit, l.Path, vendorName(l), VersionString(l.Version))
	}
	if color < NoColor || color > math.MaxInt32 || key < math.MinInt32 || key > math.MaxInt32 {
		return nil, fmt.Errorf("%w: nccl: split: color %d, key %d (color >= 0 or NoColor; both C ints)", alloc.ErrInvalidValue, color, key)
	}
	var abi *configABI
	timeout := c.ownTimeout()
	if cfg != nil {
		var err error
		if abi, err = l.configABI(*cfg); err != nil {
			return nil, err
		}
		timeout = cfg.timeout(timeout)
	}
	h, err := c.handle("split")
	if err != nil {
		return nil, err
	}
	// A nonblocking parent's split writes the new handle from NCCL's
	// thread when it completes: the slot is on the heap, alive until the
	// split settles.
	out := new(uintptr)
	err = driver.DeviceWide(l.domain, "nccl: split communicator", func() error {
		split := func() error {
			return l.watch("ncclCommSplit", []*Comm{c}, c.ownTimeout(), func() int32 {
				return gpurt.Call(l.commSplit, h, uintptr(int32(color)), uintptr(int32(key)), uintptr(unsafe.Pointer(out)), uintptr(unsafe.Pointer(abi)))
			})
		}
		if c.dev != nil {
			return c.dev.OnDevice("nccl: split communicator", split)
		}
		return split()
	})
	runtime.KeepAlive(abi)
	nh := *out
	runtime.KeepAlive(out)
	if err != nil {
		if nh != 0 { // made before the parent's abort: not handed out
			_ = gpurt.Call(l.commAbort, nh)
		}
		return nil, fmt.Errorf("nccl: split of %s by color %d: %w", c, color, err)
	}
	if nh == 0 {
		if color == NoColor {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: nccl: ncclCommSplit of %s by color %d gave no communicator", driver.ErrDriver, c, color)
	}
	var rank, ranks int32
	err = l.check("ncclCommUserRank", gpurt.Call(l.commUserRank, nh, uintptr(unsafe.Pointer(&rank))))
	if err == nil {
		err = l.check("ncclCommCount", gpurt.Call(l.commCount, nh, uintptr(unsafe.Pointer(&ranks))))
	}
	if err == nil && (ranks < 1 || rank < 0 || rank >= ranks) {
		err = fmt.Errorf("%w: nccl: split gave rank %d of %d", driver.ErrDriver, rank, ranks)
	}
	if err != nil {
		_ = gpurt.Call(l.commDestroy, nh)
		return nil, err
	}
	n := newComm(l, nh, int(rank), int(ranks), c.dev)
	n.timeout = timeout
	n.split = fmt.Sprintf("split of rank %d of %d by color %d", c.rank, c.ranks, color)
	return n, nil
}

func vendorName(l *Library) string {
	if l.RCCL {
		return "RCCL"
	}
	return "NCCL"
}
