package nccl

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES (nccl.h).
const UniqueIDBytes = 128

// UniqueID is ncclUniqueId (nccl.h: typedef struct { char
// internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId): the address of the
// bootstrap root and a magic number, opaque to callers. Every rank of a
// communicator must pass the same one to InitRank.
type UniqueID struct {
	Internal [UniqueIDBytes]byte
}

// GetUniqueID is ncclGetUniqueId. Without NCCL_COMM_ID in the environment
// it starts the bootstrap root in this process, so it is called by one
// rank (rank 0) and the id is handed to the others (FileRendezvous, or the
// engine's own channel). With NCCL_COMM_ID set (InitFromEnv) every rank
// computes the same id itself and rank 0's InitRank starts the root.
func (l *Library) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := l.check("ncclGetUniqueId", gpurt.Call(l.getUniqueID, uintptr(unsafe.Pointer(&id)))); err != nil {
		return UniqueID{}, err
	}
	return id, nil
}

// DeviceRunner runs a function on an OS thread where the rank's device is
// current: *cuda.Driver's OnDevice for NCCL, *hip.Driver's for RCCL.
// ncclCommInitRank acts on the calling thread's current device, and a
// goroutine has no fixed thread.
type DeviceRunner interface {
	OnDevice(op string, fn func() error) error
}

// InitRank makes this process's communicator for rank of ranks
// (ncclCommInitRank), on dev's device. It returns once every rank has
// joined: NCCL's bootstrap is a rendezvous, so it blocks until the peers
// call it too (NCCL's own timeouts apply). It is a device-wide call, made
// under alloc's guard: refused (driver.ErrCaptureIllegalOp, no NCCL call)
// while a Global-mode capture is active in the process, and no capture
// begins while it runs; make communicators before capturing.
func (l *Library) InitRank(dev DeviceRunner, ranks int, id UniqueID, rank int) (*Comm, error) {
	if err := l.checkInit(dev, ranks, id, rank); err != nil {
		return nil, err
	}
	var h uintptr
	err := driver.DeviceWide(l.domain, "nccl: init rank", func() error {
		return dev.OnDevice("nccl: init rank", func() error {
			return l.check("ncclCommInitRank", l.commInitRank(&h, int32(ranks), id, int32(rank)))
		})
	})
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d of %d: %w", rank, ranks, err)
	}
	return newComm(l, h, rank, ranks, dev), nil
}

// HasConfig reports whether the library makes communicators with a
// configuration (ncclCommInitRankConfig: NCCL 2.14, RCCL 2.15.5).
func (l *Library) HasConfig() bool { return l.commInitRankConfig != nil }

// InitRankConfig is InitRank with a configuration (ncclCommInitRankConfig,
// NCCL 2.14 and later; ErrNoConfig without it, or for a field the
// library's ncclConfig_t lacks). cfg is checked before any call
// (ErrBadConfig). The call is watched like every other on a communicator:
// a nonblocking communicator (Nonblocking, or NCCL_COMM_BLOCKING=0) is
// polled with ncclCommGetAsyncError until it is made, and past cfg's
// timeout it is aborted and the result is ErrCollectiveTimeout. A
// blocking init cannot be interrupted (NCCL hands out the communicator
// only when the call returns): past the deadline it is aborted once the
// call returns, with the same error. A failed or timed-out init leaves no
// communicator behind. The communicator's own timeout (SetTimeout) starts
// as cfg's.
func (l *Library) InitRankConfig(dev DeviceRunner, ranks int, id UniqueID, rank int, cfg Config) (*Comm, error) {
	if err := l.checkInit(dev, ranks, id, rank); err != nil {
		return nil, err
	}
	abi, err := l.checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := newComm(l, 0, rank, ranks, dev)
	c.timeout = cfg.timeout(alloc.DefaultWatchdog)
	// NCCL may write the handle from its own thread once the init
	// completes: the slot is on the heap, alive until the call settles.
	out := new(uintptr)
	err = driver.DeviceWide(l.domain, "nccl: init rank", func() error {
		return dev.OnDevice("nccl: init rank", func() error {
			return l.watch("ncclCommInitRankConfig", []*Comm{c}, c.timeout, func() int32 {
				r := l.commInitRankConfig(out, int32(ranks), id, int32(rank), abi)
				c.adopt(*out)
				return r
			})
		})
	})
	runtime.KeepAlive(abi)
	runtime.KeepAlive(out)
	if err != nil {
		c.abort(err) // a handle made and not yet aborted by the watch
		return nil, fmt.Errorf("nccl: rank %d of %d: %w", rank, ranks, err)
	}
	if _, err := c.handle("init rank"); err != nil {
		return nil, fmt.Errorf("%w: nccl: ncclCommInitRankConfig of rank %d of %d gave no communicator", driver.ErrDriver, rank, ranks)
	}
	return c, nil
}

// checkConfig lays cfg out for ncclCommInitRankConfig, or says why it
// cannot be passed (ErrNoConfig: the library has no such call;
// ErrBadConfig: a field out of range), before any call.
func (l *Library) checkConfig(cfg Config) (*configABI, error) {
	if !l.HasConfig() {
		return nil, fmt.Errorf("%w: %s is %s %s", ErrNoConfig, l.Path, vendorName(l), VersionString(l.Version))
	}
	return l.configABI(cfg)
}

// checkInit refuses InitRank's bad arguments before any call.
func (l *Library) checkInit(dev DeviceRunner, ranks int, id UniqueID, rank int) error {
	if dev == nil {
		return fmt.Errorf("%w: nccl: init rank: no device", alloc.ErrInvalidValue)
	}
	if ranks < 1 || ranks > 1<<30 || rank < 0 || rank >= ranks {
		return fmt.Errorf("%w: nccl: init rank: rank %d of %d", alloc.ErrInvalidValue, rank, ranks)
	}
	if l.commInitRank == nil {
		return fmt.Errorf("%w: nccl: init rank: passing the 128-byte ncclUniqueId by value is only bound on amd64 and arm64, not %s", driver.ErrBackendUnavailable, runtime.GOARCH)
	}
	if id == (UniqueID{}) {
		return fmt.Errorf("%w: nccl: init rank: zero unique id (from GetUniqueID, FileRendezvous or InitFromEnv)", alloc.ErrInvalidValue)
	}
	return nil
}
