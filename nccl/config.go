package nccl

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// A communicator's configuration, passed to ncclCommInitRankConfig and
// ncclCommSplit as an ncclConfig_t in the layout NCCL 2.17 introduced
// (ncclConfig_v21700, nccl.h.in of v2.17.1-1; doc.go has the facts and why
// every later release and RCCL accept it).

// ErrBadConfig: a Config field outside what NCCL accepts (its
// parseCommConfig). Refused before any call; it wraps
// alloc.ErrInvalidValue and the error names the field.
var ErrBadConfig = fmt.Errorf("%w: nccl: bad communicator config", alloc.ErrInvalidValue)

// ErrNoConfig: the library cannot take the configuration: it has no
// ncclCommInitRankConfig (NCCL before 2.14, RCCL before 2.15.5), or a field
// set is not in its ncclConfig_t (the CTA, CGA and network fields: 2.17).
// It wraps driver.ErrBackendUnavailable.
var ErrNoConfig = fmt.Errorf("%w: nccl: no ncclCommInitRankConfig (NCCL 2.14, RCCL 2.15.5), or a config field this library lacks", driver.ErrBackendUnavailable)

// BlockingMode is ncclConfig_t.blocking.
type BlockingMode uint8

const (
	// DefaultBlocking leaves blocking unset (NCCL_CONFIG_UNDEF_INT):
	// NCCL's default, blocking, or NCCL_COMM_BLOCKING from the environment.
	// Libraries before 2.17 refuse the unset value: they are passed 1, the
	// value of their NCCL_CONFIG_INITIALIZER (there NCCL_COMM_BLOCKING can
	// only force blocking).
	DefaultBlocking BlockingMode = iota
	// Blocks makes every call return once its work is enqueued
	// (blocking = 1).
	Blocks
	// Nonblocking makes calls return ncclInProgress while NCCL works in
	// the background (blocking = 0): init, split and collectives are then
	// settled by polling under their deadline, and a timeout aborts the
	// communicator without a call blocked in NCCL. NCCL refuses a group
	// (Library.Group) mixing blocking and nonblocking communicators
	// (group.cc: ncclInvalidArgument).
	Nonblocking
)

// NoCGACluster, as Config.CGAClusterSize, passes cgaClusterSize = 0:
// NCCL's kernels are launched without thread block clusters.
const NoCGACluster = -1

// maxCGAClusterSize is NCCL_MAX_CGA_CLUSTER_SIZE (init.cc, 2.17 to 2.30).
const maxCGAClusterSize = 8

// maxNetName bounds NetName: NCCL's network names ("IB", "Socket", a
// plugin's) are short; the bound keeps a stray buffer from being passed.
const maxNetName = 256

// Config is a communicator's ncclConfig_t. The zero Config sets nothing:
// every field NCCL has is passed unset (NCCL_CONFIG_UNDEF_INT or
// NCCL_CONFIG_UNDEF_PTR), so NCCL's defaults and its environment variables
// (NCCL_COMM_BLOCKING, NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_CGA_CLUSTER_SIZE,
// NCCL_NET, which override a config) apply.
type Config struct {
	// Blocking is blocking or nonblocking mode; DefaultBlocking is NCCL's.
	Blocking BlockingMode
	// MinCTAs and MaxCTAs bound the CTAs (thread blocks, one per channel)
	// NCCL's kernels take, so collectives leave SMs to compute kernels
	// running beside them; 0 leaves one unset. NCCL refuses a minimum
	// without a maximum, values below 1 and a minimum above the maximum;
	// it lowers either to MAXCHANNELS (32 in 2.17, 64 later, RCCL 128),
	// with a warning, when above. NCCL 2.17 and later.
	MinCTAs, MaxCTAs int
	// CGAClusterSize is the thread block cluster size of NCCL's kernels
	// on sm90 and later, 1 to 8 (NCCL_MAX_CGA_CLUSTER_SIZE); 0 leaves it
	// unset (NCCL's default, 4); NoCGACluster passes 0. NCCL 2.17.
	CGAClusterSize int
	// NetName forces a network ("IB", "Socket", a plugin's name); "" leaves
	// it unset. NCCL 2.17.
	NetName string
	// Timeout is not NCCL's: it bounds the call that makes the
	// communicator (InitRankConfig; SplitConfig is bounded by its parent's
	// timeout) and is the new communicator's own (SetTimeout). 0 is
	// alloc.DefaultWatchdog (for SplitConfig: the parent's timeout); < 0 is
	// unbounded.
	Timeout time.Duration
}

// configABI is ncclConfig_v21700 on amd64 and arm64 (nccl.h.in of
// v2.17.1-1): size_t size; unsigned int magic, version; int blocking,
// cgaClusterSize, minCTAs, maxCTAs; const char *netName. 40 bytes, no
// padding.
type configABI struct {
	size                                       uint64
	magic, version                             uint32
	blocking, cgaClusterSize, minCTAs, maxCTAs int32
	netName                                    *byte
}

const (
	configMagic   = 0xcafebeef    // NCCL_API_MAGIC; the literal in 2.14 to 2.28's NCCL_CONFIG_INITIALIZER
	configVersion = 21700         // NCCL_VERSION(2,17,0): the release whose layout configABI is
	configUndef   = math.MinInt32 // NCCL_CONFIG_UNDEF_INT
)

// configSize is sizeof(ncclConfig_v21700) on amd64 and arm64.
const configSize = 40

// The layout is part of the ABI: checked at compile time (the four ints
// from offset 16, netName at 32, 40 bytes).
var (
	_ [configSize - unsafe.Sizeof(configABI{})]struct{}
	_ [unsafe.Sizeof(configABI{}) - configSize]struct{}
	_ [16 - unsafe.Offsetof(configABI{}.blocking)]struct{}
	_ [unsafe.Offsetof(configABI{}.blocking) - 16]struct{}
	_ [32 - unsafe.Offsetof(configABI{}.netName)]struct{}
	_ [unsafe.Offsetof(configABI{}.netName) - 32]struct{}
)

// configABI checks cfg and lays it out for l, or says why not. The result holds
// NetName's bytes: keep it alive until the call has returned.
func (l *Library) configABI(cfg Config) (*configABI, error) {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrBadConfig, field, v, why)
	}
	a := &configABI{size: configSize, magic: configMagic, version: configVersion,
		blocking: configUndef, cgaClusterSize: configUndef, minCTAs: configUndef, maxCTAs: configUndef}
	switch cfg.Blocking {
	case DefaultBlocking:
		if l.Version < configVersion {
			a.blocking = 1
		}
	case Blocks:
		a.blocking = 1
	case Nonblocking:
		a.blocking = 0
	default:
		return nil, bad("Blocking", cfg.Blocking, "not DefaultBlocking, Blocks or Nonblocking")
	}
	switch {
	case cfg.MinCTAs < 0 || cfg.MinCTAs > math.MaxInt32:
		return nil, bad("MinCTAs", cfg.MinCTAs, "want 1 or more (a C int), or 0 for unset")
	case cfg.MaxCTAs < 0 || cfg.MaxCTAs > math.MaxInt32:
		return nil, bad("MaxCTAs", cfg.MaxCTAs, "want 1 or more (a C int), or 0 for unset")
	case cfg.MinCTAs > 0 && cfg.MaxCTAs == 0:
		return nil, bad("MinCTAs", cfg.MinCTAs, "set without MaxCTAs (NCCL compares it with the unset maximum and refuses)")
	case cfg.MinCTAs > cfg.MaxCTAs && cfg.MaxCTAs > 0:
		return nil, bad("MinCTAs", cfg.MinCTAs, fmt.Sprintf("above MaxCTAs %d", cfg.MaxCTAs))
	case cfg.CGAClusterSize < NoCGACluster || cfg.CGAClusterSize > maxCGAClusterSize:
		return nil, bad("CGAClusterSize", cfg.CGAClusterSize, "want 1 to 8 (NCCL_MAX_CGA_CLUSTER_SIZE), 0 for unset or NoCGACluster")
	case len(cfg.NetName) > maxNetName || strings.IndexByte(cfg.NetName, 0) >= 0:
		return nil, bad("NetName", fmt.Sprintf("%.32q", cfg.NetName), fmt.Sprintf("want a C string of at most %d bytes", maxNetName))
	}
	if cfg.MinCTAs > 0 {
		a.minCTAs = int32(cfg.MinCTAs)
	}
	if cfg.MaxCTAs > 0 {
		a.maxCTAs = int32(cfg.MaxCTAs)
	}
	switch cfg.CGAClusterSize {
	case 0:
	case NoCGACluster:
		a.cgaClusterSize = 0
	default:
		a.cgaClusterSize = int32(cfg.CGAClusterSize)
	}
	if cfg.NetName != "" {
		b := append([]byte(cfg.NetName), 0)
		a.netName = &b[0]
	}
	if l.Version < configVersion && (a.minCTAs != configUndef || a.maxCTAs != configUndef || a.cgaClusterSize != configUndef || a.netName != nil) {
		return nil, fmt.Errorf("%w: %s %s's ncclConfig_t has no minCTAs, maxCTAs, cgaClusterSize or netName (2.17)", ErrNoConfig, vendorName(l), VersionString(l.Version))
	}
	return a, nil
}

// timeout is the deadline cfg gives a new communicator, dflt when unset.
func (cfg Config) timeout(dflt time.Duration) time.Duration {
	switch {
	case cfg.Timeout < 0:
		return 0
	case cfg.Timeout == 0:
		return dflt
	}
	return cfg.Timeout
}
