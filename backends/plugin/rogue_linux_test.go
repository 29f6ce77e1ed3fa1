package plugin

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// "rogue" is cpu inside a plugin child that attacks its host, as a
// compromised vendor library there could: it lies in its device info and
// swaps or resizes the shared memory the plugin server announces. It runs
// in the child process (the test binary serves it) and talks to the real
// host over the real wire. Options (besides cpu's): alignment=N,
// total=N, name=STRING (Info), hostfd=empty|unsealed (HostAlloc's memfd is replaced
// by an empty one, or one of the same size without seals), span=grow
// (the second DirectSpan announces 512 times the region's size
// and a span past its end),
// spanfd=unsealed (DirectSpan's memfd replaced, inode announced too).
func init() {
	driver.Register("rogue", func(ctx context.Context, o driver.Options, mem driver.Memory) (driver.Driver, error) {
		regions, _ := mem.Host.(*childRegions)
		if regions == nil {
			return nil, fmt.Errorf("rogue: not in a plugin child")
		}
		d, opts, err := cpuWithout(ctx, o, mem, "alignment", "total", "name", "hostfd", "span", "spanfd")
		if err != nil {
			return nil, err
		}
		return &rogue{Driver: d, opts: opts, regions: regions}, nil
	})
}

type rogue struct {
	driver.Driver
	opts    map[string]string
	regions *childRegions
	spans   int
}

func (r *rogue) Info() driver.DeviceInfo {
	i := r.Driver.Info()
	if v, ok := r.opts["alignment"]; ok {
		i.Alignment, _ = strconv.ParseInt(v, 0, 64)
	}
	if v, ok := r.opts["total"]; ok {
		i.TotalMemory, _ = strconv.ParseInt(v, 0, 64)
	}
	if v, ok := r.opts["name"]; ok {
		i.Name = v
	}
	return i
}

// swapFD puts a fresh memfd of size bytes, unsealed, on reg's fd number,
// and returns its inode.
func swapFD(reg *region, size int64) uint64 {
	fd, err := unix.MemfdCreate("rogue", unix.MFD_CLOEXEC)
	if err != nil {
		panic(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, size); err != nil {
		panic(err)
	}
	if err := unix.Dup3(fd, reg.fd, unix.O_CLOEXEC); err != nil {
		panic(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		panic(err)
	}
	return st.Ino
}

func (r *rogue) HostAlloc(n int64) ([]byte, error) {
	b, err := r.Driver.HostAlloc(n)
	if err != nil {
		return nil, err
	}
	switch reg := r.regions.byPtr(b); r.opts["hostfd"] {
	case "empty":
		swapFD(reg, 0)
	case "unsealed":
		swapFD(reg, n)
	}
	return b, nil
}

func (r *rogue) DirectSpan(p driver.DevicePtr, n int64, s driver.Stream) ([]byte, func(), error) {
	b, release, err := r.Driver.(driver.DirectSpanner).DirectSpan(p, n, s)
	if err != nil {
		return nil, nil, err
	}
	reg, _ := r.regions.containing(b)
	r.spans++
	switch {
	case r.opts["span"] == "grow" && r.spans == 2:
		// the region claims 512 times its size, and the span lies past
		// its real end
		r.regions.mu.Lock()
		was := len(reg.buf)
		reg.buf = unsafe.Slice(unsafe.SliceData(reg.buf), 512*was)
		r.regions.mu.Unlock()
		b = unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(reg.buf)), was)), n)
	case r.opts["spanfd"] == "unsealed" && r.spans == 1:
		ino := swapFD(reg, int64(len(reg.buf)))
		r.regions.mu.Lock()
		reg.ino = ino
		r.regions.mu.Unlock()
	}
	return b, release, nil
}

// guarded runs f with a fault on a bad mapping turned into a panic, and
// returns what f panicked with: a test failure instead of a crash of the
// test binary (what it would be in an engine). Per goroutine, like
// debug.SetPanicOnFault.
func guarded(f func()) (panicked any) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { panicked = recover() }()
	f()
	return nil
}

// A child that swaps its HostAlloc memfd for an empty or unsealed one gets
// an error, never a mapping that faults in the host.
func TestRogueHostAllocFD(t *testing.T) {
	for _, attack := range []string{"empty", "unsealed"} {
		t.Run(attack, func(t *testing.T) {
			d := open(t, "plugin:rogue:hostfd="+attack)
			var b []byte
			var err error
			if e := guarded(func() {
				b, err = d.HostAlloc(4096)
				if err == nil {
					b[0] = 1 // SIGBUS on an empty file
				}
			}); e != nil {
				t.Fatalf("the host faulted on the child's memory: %v", e)
			}
			require.ErrorIs(t, err, driver.ErrDriver, "mapped the child's unsafe memfd")
			require.ErrorIs(t, err, errUnsafeRegion)
			require.Nil(t, b)
			require.Zero(t, d.regions.Len(), "nothing registered")
		})
	}
}

// A direct span whose memfd was swapped for an unsealed one (inode
// announced to match) is refused.
func TestRogueDirectSpanFD(t *testing.T) {
	d, s := openStream(t, "plugin:rogue:spanfd=unsealed")
	p, err := d.Malloc(4096)
	require.NoError(t, err)
	err = d.CopyHtoD(p, make([]byte, 64), s)
	require.ErrorIs(t, err, errUnsafeRegion)
	require.Zero(t, d.direct.len(), "nothing cached")
}

// A second direct span of a cached region announcing a larger size is a
// malformed reply, not a slice out of range in the host.
func TestRogueDirectSpanSize(t *testing.T) {
	d, s := openStream(t, "plugin:rogue:span=grow")
	p, err := d.Malloc(4096)
	require.NoError(t, err)
	require.NoError(t, d.CopyHtoD(p, make([]byte, 4096), s))
	var cerr error
	if e := guarded(func() {
		// the child now answers with a span past the region's real end
		cerr = d.CopyHtoD(p, make([]byte, 64), s)
	}); e != nil {
		t.Fatalf("the host panicked on a forged size: %v", e)
	}
	require.ErrorIs(t, cerr, errMalformed)
}

// A forged alignment or device name is refused or cleaned at Open, so
// alloc.New never spins on it and labels stay valid UTF-8.
func TestRogueDeviceInfo(t *testing.T) {
	for _, al := range []string{"0", "3", "9223372036854775807", "-4096", "2147483648"} {
		_, err := backends.OpenDriver(ctx, "plugin:rogue:alignment="+al)
		require.ErrorIs(t, err, errMalformed, "alignment %s", al)
	}
	_, err := backends.OpenDriver(ctx, "plugin:rogue:total=-1")
	require.ErrorIs(t, err, errMalformed, "negative device memory")
	d := open(t, "plugin:rogue:name=gpu\xff\xfe")
	require.Equal(t, "gpu\uFFFD", d.Info().Name)
	long := open(t, "plugin:rogue:name="+strings.Repeat("x", 1000))
	require.Len(t, long.Info().Name, maxDeviceName)
}
