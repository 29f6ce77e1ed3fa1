package plugin

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/cpu"
)

// Pageable blocking copies over plugin:cpu take the single-copy path, round
// trip at odd and chunk-crossing sizes and order with queued work.
func TestDirectCopies(t *testing.T) {
	d := open(t, "plugin:cpu")
	h := hostOf(d)
	s, err := d.CreateStream()
	require.NoError(t, err)
	for _, n := range []int{1, 4095, chunk - 1, chunk + 1, 3*chunk + 12345} {
		p, err := d.MallocAsync(int64(n), s)
		require.NoError(t, err)
		q, err := d.MallocAsync(int64(n), s)
		require.NoError(t, err)
		src := pattern(n, byte(n))
		require.NoError(t, d.CopyHtoD(p, src, s), "size %d", n)
		// Work queued after the upload sees its bytes; the download waits
		// for that work.
		require.NoError(t, d.CopyDtoDAsync(q, p, int64(n), s))
		got := make([]byte, n)
		require.NoError(t, d.CopyDtoH(got, q, s), "size %d", n)
		require.True(t, bytes.Equal(src, got), "size %d: round trip", n)
		require.NoError(t, d.MemsetAsync(p, 5, int64(n), s))
		require.NoError(t, d.CopyDtoH(got, p, s))
		require.Equal(t, bytes.Repeat([]byte{5}, n), got, "size %d: download after a queued memset", n)
		require.NoError(t, d.FreeAsync(p, s))
		require.NoError(t, d.FreeAsync(q, s))
	}
	require.NoError(t, d.StreamSynchronize(s))
	require.False(t, h.noDirect.Load(), "cpu offers direct access")
	require.Positive(t, h.direct.len(), "copies went through mapped device memory")
}

// An out-of-range direct copy fails like the in-process one and writes
// nothing, on either side.
func TestDirectCopyOutOfRangeWritesNothing(t *testing.T) {
	d, s := openStream(t, "plugin:cpu")
	n := 2*chunk + 100
	p, err := d.Malloc(int64(n))
	require.NoError(t, err)
	require.ErrorIs(t, d.CopyHtoD(p, pattern(n+1, 1), s), alloc.ErrInvalidValue)
	require.ErrorIs(t, d.CopyHtoD(p+1, pattern(n, 1), s), alloc.ErrInvalidValue)
	require.ErrorIs(t, d.CopyHtoD(driver.DevicePtr(12345), pattern(10, 1), s), alloc.ErrInvalidValue)
	dst := pattern(n+1, 3)
	require.ErrorIs(t, d.CopyDtoH(dst, p, s), alloc.ErrInvalidValue)
	require.Equal(t, pattern(n+1, 3), dst, "a failed download leaves dst alone")
	got := make([]byte, n)
	require.NoError(t, d.CopyDtoH(got, p, s))
	require.Equal(t, make([]byte, n), got, "nothing was written")
	require.False(t, hostOf(d).noDirect.Load(), "a range error is not 'unsupported'")
	require.NoError(t, d.Free(p))
}

// A pageable blocking copy on a capturing stream is refused and invalidates
// the capture, over the plugin exactly as in process.
func TestDirectCopyRefusedDuringCapture(t *testing.T) {
	for _, cfg := range []string{"cpu", "plugin:cpu"} {
		for _, up := range []bool{true, false} {
			d, err := backends.OpenDriver(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			s, err := d.CreateStream()
			require.NoError(t, err)
			p, err := d.Malloc(1 << 20)
			require.NoError(t, err)
			buf := pattern(1<<20, 9)
			require.NoError(t, d.BeginCapture(s, alloc.Global))
			if up {
				err = d.CopyHtoD(p, buf, s)
			} else {
				err = d.CopyDtoH(buf, p, s)
			}
			require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "%s up=%v", cfg, up)
			st, err := d.StreamCaptureStatus(s)
			require.NoError(t, err)
			require.Equal(t, driver.CaptureInvalidated, st, "%s up=%v", cfg, up)
			_, err = d.EndCapture(s)
			require.ErrorIs(t, err, alloc.ErrCaptureInvalidated, "%s up=%v", cfg, up)
			require.Equal(t, pattern(1<<20, 9), buf, "%s: a refused download writes nothing", cfg)
			got := make([]byte, 1<<20)
			require.NoError(t, d.CopyDtoH(got, p, s))
			require.Equal(t, make([]byte, 1<<20), got, "%s: a refused upload writes nothing", cfg)
			if cfg != "cpu" {
				require.False(t, hostOf(d).noDirect.Load())
			}
		}
	}
}

// A backend without DirectSpan ("faulty" wraps cpu behind driver.Driver)
// answers "unsupported" once; the driver stages from then on.
func TestDirectFallsBackToStaging(t *testing.T) {
	d := open(t, "plugin:faulty")
	h := hostOf(d)
	s, err := d.CreateStream()
	require.NoError(t, err)
	n := chunk + 7
	p, err := d.Malloc(int64(n))
	require.NoError(t, err)
	require.False(t, h.noDirect.Load())
	src := pattern(n, 4)
	require.NoError(t, d.CopyHtoD(p, src, s))
	require.True(t, h.noDirect.Load(), "the first copy learned there is no direct access")
	got := make([]byte, n)
	require.NoError(t, d.CopyDtoH(got, p, s))
	require.Equal(t, src, got)
	require.Zero(t, h.direct.len())
	// The opcode itself now answers errNoDirect, so no later copy asks.
	_, err = h.call(opDirectSpan, newReq(opDirectSpan).u64(uint64(p)).i64(1).u64(uint64(s)))
	require.ErrorIs(t, err, errNoDirect)
	require.ErrorIs(t, d.CopyHtoD(p, pattern(n+1, 1), s), alloc.ErrInvalidValue, "staging keeps its errors")
}

// The server says "unsupported" for a backend whose device memory is not
// shared, even if it has DirectSpan.
func TestDirectSpanNeedsSharedDeviceMemory(t *testing.T) {
	drv, err := cpu.New(cpu.Options{}) // Go heap device memory
	require.NoError(t, err)
	defer drv.Close()
	srv := newServer()
	srv.drv = drv
	p, err := drv.Malloc(64)
	require.NoError(t, err)
	s, err := drv.CreateStream()
	require.NoError(t, err)
	_, err = decodeReply(srv.call(context.Background(), append([]byte{0}, newReq(opDirectSpan).u64(uint64(p)).i64(64).u64(uint64(s)).b...)))
	require.ErrorIs(t, err, errNoDirect)
	_, err = decodeReply(srv.call(context.Background(), append([]byte{0}, newReq(opDirectSpan).u64(uint64(p)).i64(0).u64(uint64(s)).b...)))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
}

// More regions than the cache holds: it stays bounded, and every buffer
// still round trips (evicted ones are mapped again).
func TestDirectCacheBound(t *testing.T) {
	d := open(t, "plugin:cpu")
	h := hostOf(d)
	s, err := d.CreateStream()
	require.NoError(t, err)
	const k = maxDirectMaps + 10
	ps := make([]driver.DevicePtr, k)
	for i := range ps {
		ps[i], err = d.Malloc(4096)
		require.NoError(t, err)
		require.NoError(t, d.CopyHtoD(ps[i], pattern(4096, byte(i)), s))
		require.LessOrEqual(t, h.direct.len(), maxDirectMaps)
	}
	require.Equal(t, maxDirectMaps, h.direct.len())
	got := make([]byte, 4096)
	for i, p := range ps {
		require.NoError(t, d.CopyDtoH(got, p, s))
		require.Equal(t, pattern(4096, byte(i)), got, "buffer %d", i)
	}
}

// A mapping evicted while a copy uses it stays mapped until that copy puts
// it back.
func TestDirectCacheEvictsInUseLate(t *testing.T) {
	var c directCache
	anon := func() []byte {
		b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		require.NoError(t, err)
		return b
	}
	first := c.add(1, anon())
	for id := uint64(2); id <= maxDirectMaps+1; id++ {
		c.put(c.add(id, anon()))
	}
	require.Equal(t, maxDirectMaps, c.len())
	require.Nil(t, c.get(1), "the oldest was evicted")
	first.buf[0] = 1 // still mapped: would fault otherwise
	require.True(t, first.evicted)
	c.put(first)
	m := c.get(maxDirectMaps + 1)
	require.NotNil(t, m)
	dup := c.add(maxDirectMaps+1, anon())
	require.Same(t, m, dup, "a concurrent second mapping gives way to the cached one")
	c.put(m)
	c.put(dup)
	c.drop()
	require.Zero(t, c.len())
}

// A region whose fd number now names another file is refused.
func TestMapChildChecksInode(t *testing.T) {
	r, err := newRegion(1, 4096)
	require.NoError(t, err)
	defer r.release()
	_, err = mapChildFile(unix.Getpid(), r.fd, 4096, r.ino+1)
	require.ErrorIs(t, err, errStaleRegion)
	_, err = mapChildFile(unix.Getpid(), r.fd, 8192, r.ino)
	require.ErrorIs(t, err, errStaleRegion, "shorter than announced")
	b, err := mapChildFile(unix.Getpid(), r.fd, 4096, r.ino)
	require.NoError(t, err)
	b[10] = 42
	require.Equal(t, byte(42), r.buf[10], "same pages")
	require.NoError(t, unix.Munmap(b))
}
