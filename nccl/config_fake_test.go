package nccl_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// received is what the stand-in's last config held: its bytes as
// ncclConfig_v21700 (nccl.h.in of NCCL 2.17.1) and the string netName
// pointed at.
type received struct {
	size                                       uint64
	magic, version                             uint32
	blocking, cgaClusterSize, minCTAs, maxCTAs int32
	netName                                    uint64 // the pointer: 0 or not
	net                                        string
	count                                      int // configs received so far
}

const undef = math.MinInt32 // NCCL_CONFIG_UNDEF_INT

func (f *fake) lastConfig(t *testing.T) received {
	t.Helper()
	raw := make([]byte, 40)
	net := make([]byte, 64)
	var count int32
	size := f.call(t, "fake_last_config", uintptr(unsafe.Pointer(&raw[0])), uintptr(len(raw)), uintptr(unsafe.Pointer(&net[0])), uintptr(len(net)), uintptr(unsafe.Pointer(&count)))
	le := binary.LittleEndian
	r := received{
		size: le.Uint64(raw[0:]), magic: le.Uint32(raw[8:]), version: le.Uint32(raw[12:]),
		blocking: int32(le.Uint32(raw[16:])), cgaClusterSize: int32(le.Uint32(raw[20:])),
		minCTAs: int32(le.Uint32(raw[24:])), maxCTAs: int32(le.Uint32(raw[28:])),
		netName: le.Uint64(raw[32:]), net: strings.TrimRight(string(net), "\x00"), count: int(count),
	}
	require.EqualValues(t, size, r.size)
	return r
}

// live counts the stand-in's communicators neither destroyed nor aborted.
func (f *fake) live(t *testing.T) int { return int(int32(f.call(t, "fake_live"))) }

// The config crosses as NCCL 2.17's ncclConfig_t, byte for byte: size 40,
// NCCL_API_MAGIC, version 2.17.0, each field set or NCCL_CONFIG_UNDEF_INT,
// netName a C string; the unique id, count and rank around it intact.
func TestInitRankConfigPassesTheConfig(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		dev := &onCaller{}
		c, err := f.l.InitRankConfig(dev, 4, id, 2, nccl.Config{Blocking: nccl.Blocks, MinCTAs: 2, MaxCTAs: 8, CGAClusterSize: nccl.NoCGACluster, NetName: "Socket"})
		require.NoError(t, err)
		require.EqualValues(t, 1, dev.calls.Load(), "made on the device's thread")
		require.Equal(t, 2, c.Rank())
		require.Equal(t, 4, c.Ranks())
		got, ranks, rank, _ := f.last()
		require.Equal(t, id, got)
		require.EqualValues(t, 4, ranks)
		require.EqualValues(t, 2, rank)
		r := f.lastConfig(t)
		require.Equal(t, received{size: 40, magic: 0xcafebeef, version: 21700, blocking: 1, cgaClusterSize: 0, minCTAs: 2, maxCTAs: 8,
			netName: r.netName, net: "Socket", count: 1}, r)
		require.NotZero(t, r.netName)
		require.NoError(t, c.Destroy())

		// The zero Config sets nothing: NCCL's defaults and environment apply.
		c, err = f.l.InitRankConfig(dev, 1, id, 0, nccl.Config{})
		require.NoError(t, err)
		require.Equal(t, received{size: 40, magic: 0xcafebeef, version: 21700, blocking: undef, cgaClusterSize: undef, minCTAs: undef, maxCTAs: undef, count: 2}, f.lastConfig(t))
		c2, err := f.l.InitRankConfig(dev, 1, id, 0, nccl.Config{MaxCTAs: 4, CGAClusterSize: 2})
		require.NoError(t, err)
		require.Equal(t, received{size: 40, magic: 0xcafebeef, version: 21700, blocking: undef, cgaClusterSize: 2, minCTAs: undef, maxCTAs: 4, count: 3}, f.lastConfig(t))
		require.NoError(t, c.Destroy())
		require.NoError(t, c2.Destroy())
		require.Zero(t, f.live(t))
		require.Zero(t, f.misuse(t))
	})
}

// The stand-in checks a config as NCCL's parseCommConfig does, so the
// package's configs passing it means something: a wrong magic, and a
// minimum with no maximum, are ncclInvalidArgument there.
func TestStandInChecksTheConfig(t *testing.T) {
	f := loadFake(t)
	sym, err := purego.Dlsym(f.h, "ncclCommInitRankConfig")
	require.NoError(t, err)
	var initConfig func(comm *uintptr, nranks int32, id nccl.UniqueID, rank int32, cfg *[40]byte) int32
	purego.RegisterFunc(&initConfig, sym)
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	cfg := func(magic uint32, minCTAs, maxCTAs int32) *[40]byte {
		var b [40]byte
		le := binary.LittleEndian
		le.PutUint64(b[0:], 40)
		le.PutUint32(b[8:], magic)
		le.PutUint32(b[12:], 21700)
		for i, v := range []int32{undef, undef, minCTAs, maxCTAs} {
			le.PutUint32(b[16+4*i:], uint32(v))
		}
		return &b
	}
	var h uintptr
	require.EqualValues(t, 4, initConfig(&h, 1, id, 0, cfg(0xcafebeee, undef, undef)), "bad magic")
	require.EqualValues(t, 4, initConfig(&h, 1, id, 0, cfg(0xcafebeef, 2, undef)), "a minimum without a maximum")
	require.EqualValues(t, 0, initConfig(&h, 1, id, 0, cfg(0xcafebeef, 2, 4)))
	require.NotZero(t, h)
}

// A nonblocking communicator's init returns ncclInProgress and is polled
// until it is made; its collectives are settled the same way.
func TestInitRankConfigNonblockingCompletesByPolling(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		c, err := f.l.InitRankConfig(&onCaller{}, 2, id, 0, nccl.Config{Blocking: nccl.Nonblocking, MaxCTAs: 16})
		require.NoError(t, err)
		r := f.lastConfig(t)
		require.EqualValues(t, 0, r.blocking)
		require.EqualValues(t, 16, r.maxCTAs)
		a, x, y := allocator(t, f.l, time.Second)
		require.NoError(t, c.AllReduce(a, x, y, 4, nccl.Int32, nccl.Sum))
		require.NoError(t, c.Wait(a))
		require.NoError(t, c.Destroy())
		require.Zero(t, f.live(t))
		require.Zero(t, f.misuse(t))
	})
}

// An init past its deadline leaves no communicator: a nonblocking one
// whose peers never join is aborted at the config's timeout; a blocking
// one cannot be interrupted (NCCL hands out the handle only when it
// returns), so the communicator it made past the deadline is aborted then.
// Either way the result is ErrCollectiveTimeout naming the call and the
// rank, no communicator is returned or left alive in the library, and
// nothing calls into it afterwards.
func TestInitRankConfigPastTheDeadlineLeavesNoCommunicator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  nccl.BlockingMode
		stall func(t *testing.T, f *fake)
	}{
		{"nonblocking_never_completes", nccl.Nonblocking, func(t *testing.T, f *fake) { f.hang(t, hangProgress) }},
		{"blocking_returns_late", nccl.Blocks, func(t *testing.T, f *fake) { f.call(t, "fake_init_delay", 300) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBuild(t, func(t *testing.T, f *fake) {
				id, err := f.l.GetUniqueID()
				require.NoError(t, err)
				tc.stall(t, f)
				start := time.Now()
				c, err := f.l.InitRankConfig(&onCaller{}, 2, id, 1, nccl.Config{Blocking: tc.mode, Timeout: 100 * time.Millisecond})
				require.Less(t, time.Since(start), 5*time.Second)
				require.ErrorIs(t, err, nccl.ErrCollectiveTimeout)
				require.Contains(t, err.Error(), "ncclCommInitRankConfig")
				require.Contains(t, err.Error(), "rank 1 of 2")
				require.Nil(t, c)
				f.hang(t, hangNone)
				require.Zero(t, f.live(t), "the half-made communicator is aborted")
				require.Zero(t, f.misuse(t))
			})
		})
	}
}

// Bad values are refused before any call (ErrBadConfig, an
// alloc.ErrInvalidValue naming the field), by InitRankConfig and
// SplitConfig alike.
func TestConfigRefusedBeforeAnyCall(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		parent := f.comm(t, 0, 2)
		_, _, _, inits := f.last()
		dev := &onCaller{}
		for _, tc := range []struct {
			field string
			cfg   nccl.Config
		}{
			{"Blocking", nccl.Config{Blocking: 9}},
			{"MinCTAs", nccl.Config{MinCTAs: -1, MaxCTAs: 4}},
			{"MaxCTAs", nccl.Config{MaxCTAs: -3}},
			{"MaxCTAs", nccl.Config{MaxCTAs: math.MaxInt32 + 1}},
			{"MinCTAs", nccl.Config{MinCTAs: 4}},
			{"MinCTAs", nccl.Config{MinCTAs: 8, MaxCTAs: 4}},
			{"CGAClusterSize", nccl.Config{CGAClusterSize: 9}},
			{"CGAClusterSize", nccl.Config{CGAClusterSize: -2}},
			{"NetName", nccl.Config{NetName: "IB\x00x"}},
			{"NetName", nccl.Config{NetName: strings.Repeat("n", 257)}},
		} {
			_, err := f.l.InitRankConfig(dev, 1, id, 0, tc.cfg)
			require.ErrorIs(t, err, nccl.ErrBadConfig, tc.field)
			require.ErrorIs(t, err, alloc.ErrInvalidValue, tc.field)
			require.Contains(t, err.Error(), tc.field)
			_, err = parent.SplitConfig(0, 0, tc.cfg)
			require.ErrorIs(t, err, nccl.ErrBadConfig, tc.field)
		}
		require.Zero(t, dev.calls.Load(), "refused before the device thread")
		_, _, _, after := f.last()
		require.Equal(t, inits, after, "no init made")
		require.Zero(t, f.lastConfig(t).count, "no config reached the library")
		require.Empty(t, f.log(t), "no split made")
		require.NoError(t, parent.Destroy())
	})
}

// Without ncclCommInitRankConfig (NCCL before 2.14) InitRankConfig is
// ErrNoConfig; a 2.14 library's config has blocking only: the other
// fields are ErrNoConfig, and an unset Blocking is passed as 1 (2.14 to
// 2.16 refuse NCCL_CONFIG_UNDEF_INT there; the stand-in does too).
func TestInitRankConfigNeedsTheLibrary(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		require.False(t, f.l.HasConfig())
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		_, err = f.l.InitRankConfig(&onCaller{}, 1, id, 0, nccl.Config{})
		require.ErrorIs(t, err, nccl.ErrNoConfig)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), f.l.Path)
		_, _, _, inits := f.last()
		require.Zero(t, inits)
	}, "-DFAKE_NO_CONFIG")
	eachBuild(t, func(t *testing.T, f *fake) {
		require.True(t, f.l.HasConfig())
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		_, err = f.l.InitRankConfig(&onCaller{}, 1, id, 0, nccl.Config{MaxCTAs: 4})
		require.ErrorIs(t, err, nccl.ErrNoConfig)
		require.Contains(t, err.Error(), "2.14.3")
		require.Zero(t, f.lastConfig(t).count)
		c, err := f.l.InitRankConfig(&onCaller{}, 1, id, 0, nccl.Config{})
		require.NoError(t, err)
		require.EqualValues(t, 1, f.lastConfig(t).blocking)
		require.NoError(t, c.Destroy())
		c, err = f.l.InitRankConfig(&onCaller{}, 1, id, 0, nccl.Config{Blocking: nccl.Nonblocking})
		require.NoError(t, err)
		require.EqualValues(t, 0, f.lastConfig(t).blocking)
		require.NoError(t, c.Destroy())
	}, "-DFAKE_VERSION=21403")
}

// SplitConfig passes the new communicator's config; a nonblocking parent's
// split is polled until NCCL writes the new handle, and one that never
// completes is bounded by the parent's timeout, which aborts the parent.
func TestSplitConfig(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		id, err := f.l.GetUniqueID()
		require.NoError(t, err)
		parent, err := f.l.InitRankConfig(&onCaller{}, 4, id, 1, nccl.Config{Blocking: nccl.Nonblocking})
		require.NoError(t, err)
		s, err := parent.SplitConfig(2, 5, nccl.Config{Blocking: nccl.Nonblocking, MinCTAs: 1, MaxCTAs: 2, NetName: "IB"})
		require.NoError(t, err)
		require.NotNil(t, s, "the handle NCCL wrote when the split completed")
		require.Equal(t, 1, s.Rank())
		require.Equal(t, 4, s.Ranks())
		require.Regexp(t, `^split comm=\d+ color=2 key=5 config=1\n$`, f.log(t))
		r := f.lastConfig(t)
		require.Equal(t, received{size: 40, magic: 0xcafebeef, version: 21700, blocking: 0, cgaClusterSize: undef, minCTAs: 1, maxCTAs: 2,
			netName: r.netName, net: "IB", count: 2}, r)
		a, x, y := allocator(t, f.l, time.Second)
		require.NoError(t, s.AllReduce(a, x, y, 4, nccl.Int32, nccl.Sum), "nonblocking too: polled")
		none, err := parent.SplitConfig(nccl.NoColor, 0, nccl.Config{})
		require.NoError(t, err)
		require.Nil(t, none)
		f.log(t)
		require.NoError(t, s.Destroy())

		parent.SetTimeout(100 * time.Millisecond)
		f.hang(t, hangProgress)
		_, err = parent.SplitConfig(0, 0, nccl.Config{Blocking: nccl.Blocks})
		requireAborted(t, f, err, "ncclCommSplit", parent, a, x)
		require.Zero(t, f.live(t), "no communicator left behind")
	})
}
