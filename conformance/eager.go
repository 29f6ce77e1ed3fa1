package conformance

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// roundTripSizes cover a single byte, an odd size below the smallest size
// class, a page, and a large odd size that crosses class boundaries.
var roundTripSizes = []int64{1, 255, 4 << 10, 1<<20 + 3}

// info: what the driver says about the device is usable and honest.
func (s *suite) info(t *testing.T) {
	t.Run("device", func(t *testing.T) {
		e := s.env(t)
		info := e.drv.Info()
		assert.NotEmpty(t, e.drv.Name())
		assert.NotEmpty(t, e.drv.CaptureDomain())
		assert.Positive(t, info.TotalMemory)
		require.Positive(t, info.Alignment)
		assert.Equal(t, 1, bits.OnesCount64(uint64(info.Alignment)), "alignment %d is not a power of two", info.Alignment)
		assert.Greater(t, info.Alignment, int64(1), "an alignment of 1 guarantees nothing to kernels")
		assert.Equal(t, info, e.a.Info())
	})
	t.Run("allocations_aligned", func(t *testing.T) {
		e := s.env(t)
		al := uint64(e.a.Info().Alignment)
		for _, n := range []int64{1, 3, 255, 256, 257, 4095, 65537, 1<<20 + 3} {
			b := mustAlloc(t, e.a, n)
			sb, err := e.a.AllocSync(n)
			require.NoError(t, err)
			assert.Zero(t, uint64(b.Ptr())%al, "Alloc(%d) = %#x", n, b.Ptr())
			assert.Zero(t, uint64(sb.Ptr())%al, "AllocSync(%d) = %#x", n, sb.Ptr())
			assert.Equal(t, n, b.Size())
			require.NoError(t, e.a.Free(b))
			require.NoError(t, e.a.Free(sb))
		}
		require.NoError(t, e.a.BeginCapture(alloc.ThreadLocal))
		c, err := e.a.Alloc(1000)
		require.NoError(t, err)
		assert.Zero(t, uint64(c.Ptr())%al, "captured Alloc = %#x", c.Ptr())
		g, err := e.a.EndCapture()
		require.NoError(t, err)
		require.NoError(t, g.Close())
	})
}

// eager: plain stream-ordered correctness with no capture anywhere.
func (s *suite) eager(t *testing.T) {
	runRules(t,
		rule{"roundtrip_pageable", eachRoundTripSize(s.pageableRoundTripKeepsBytes)},
		rule{"roundtrip_pinned", eachRoundTripSize(s.pinnedRoundTripKeepsBytes)},
		rule{"memset", s.memsetsLandInOrder},
		rule{"copy_offsets", s.copyHonoursOffsets},
		rule{"slice_views", s.sliceViewsAliasTheirParent},
		rule{"stream_order", s.streamRunsInOrder},
		rule{"alloc_sync", s.allocSyncIsOneDriverMalloc},
		rule{"pool_reuse", s.poolReusesFreedBlocksAndTrimGivesBack},
		rule{"host_buffer", s.hostBufferCountedUntilClosed},
	)
}

// eachRoundTripSize makes a check that runs check for each of
// roundTripSizes, the i-th a subtest named sizeName(n).
func eachRoundTripSize(check func(t *testing.T, i int, n int64)) func(t *testing.T) {
	return func(t *testing.T) {
		for i, n := range roundTripSizes {
			t.Run(sizeName(n), func(t *testing.T) { check(t, i, n) })
		}
	}
}

func (s *suite) pageableRoundTripKeepsBytes(t *testing.T, i int, n int64) {
	e := s.env(t)
	b := mustAlloc(t, e.a, n)
	want := pattern(int(n), uint64(i+1))
	upload(t, e.a, b, 0, want)
	require.Equal(t, want, download(t, e.a, b, 0, n))
	require.NoError(t, e.a.Free(b))
}

func (s *suite) pinnedRoundTripKeepsBytes(t *testing.T, i int, n int64) {
	e := s.env(t)
	b := mustAlloc(t, e.a, n)
	in, out := mustHost(t, e.a, n), mustHost(t, e.a, n)
	want := pattern(int(n), uint64(i+100))
	copy(in.Bytes(), want)
	require.NoError(t, e.a.UploadHost(b, 0, in, 0, n))
	require.NoError(t, e.a.DownloadHost(out, 0, b, 0, n))
	require.NoError(t, e.a.Synchronize(), "the pinned path is complete only after Synchronize")
	require.Equal(t, want, out.Bytes())
	done, err := e.a.Query()
	require.NoError(t, err)
	assert.True(t, done, "Query after Synchronize must report the stream idle")
	require.NoError(t, e.a.Free(b))
	require.NoError(t, in.Close())
	require.NoError(t, out.Close())
}

func (s *suite) memsetsLandInOrder(t *testing.T) {
	e := s.env(t)
	const n = 4096
	b := mustAlloc(t, e.a, n)
	require.NoError(t, e.a.Memset(b, 0, 0x11, n))
	require.NoError(t, e.a.Memset(b, 100, 0xEE, 1000))
	require.NoError(t, e.a.Memset(b, n-1, 0x42, 1))
	want := repeat(0x11, n)
	fill(want[100:1100], 0xEE)
	want[n-1] = 0x42
	require.Equal(t, want, download(t, e.a, b, 0, n))
	require.NoError(t, e.a.Free(b))
}

func (s *suite) copyHonoursOffsets(t *testing.T) {
	e := s.env(t)
	src, dst := mustAlloc(t, e.a, 5000), mustAlloc(t, e.a, 3000)
	sp := pattern(5000, 7)
	upload(t, e.a, src, 0, sp)
	require.NoError(t, e.a.Memset(dst, 0, 0xCC, 3000))
	require.NoError(t, e.a.Copy(dst, 301, src, 17, 1999))
	want := repeat(0xCC, 3000)
	copy(want[301:], sp[17:17+1999])
	require.Equal(t, want, download(t, e.a, dst, 0, 3000))
	require.NoError(t, e.a.Free(src))
	require.NoError(t, e.a.Free(dst))
}

// sliceViewsAliasTheirParent: a view (and a view of a view) is the
// parent's memory at an offset, and dies with its buffer.
func (s *suite) sliceViewsAliasTheirParent(t *testing.T) {
	e := s.env(t)
	al := e.a.Info().Alignment
	b := mustAlloc(t, e.a, 8*al)
	require.NoError(t, e.a.Memset(b, 0, 0, 8*al))
	v, err := e.a.Slice(b, 2*al, 3*al)
	require.NoError(t, err)
	assert.Equal(t, 3*al, v.Size())
	assert.Equal(t, b.Ptr()+driver.DevicePtr(2*al), v.Ptr())
	data := pattern(int(3*al), 9)
	upload(t, e.a, v, 0, data)
	require.NoError(t, e.a.Memset(v, al, 0xAB, 1))
	data[al] = 0xAB
	want := make([]byte, 8*al)
	copy(want[2*al:], data)
	require.Equal(t, want, download(t, e.a, b, 0, 8*al), "writes through a view land in the parent")
	require.Equal(t, data, download(t, e.a, v, 0, 3*al))
	vv, err := e.a.Slice(v, al, al)
	require.NoError(t, err, "a view of a view")
	assert.Equal(t, b.Ptr()+driver.DevicePtr(3*al), vv.Ptr())
	require.NoError(t, e.a.Free(b))
	_, err = e.a.Slice(b, 0, al)
	require.ErrorIs(t, err, alloc.ErrInvalidBuffer, "a view of a freed buffer")
	require.ErrorIs(t, e.a.Upload(v, 0, []byte{1}), alloc.ErrInvalidBuffer, "a view dies with its buffer")
}

// streamRunsInOrder: each step overwrites the previous one; only in-order
// execution yields the final picture.
func (s *suite) streamRunsInOrder(t *testing.T) {
	e := s.env(t)
	const n = 4096
	b, c := mustAlloc(t, e.a, n), mustAlloc(t, e.a, n)
	h := mustHost(t, e.a, n)
	copy(h.Bytes(), pattern(n, 3))
	require.NoError(t, e.a.UploadHost(b, 0, h, 0, n))
	require.NoError(t, e.a.Memset(b, 0, 0x77, n/2))
	require.NoError(t, e.a.Copy(c, 0, b, 0, n))
	require.NoError(t, e.a.Memset(b, 0, 0, n))
	require.NoError(t, e.a.DownloadHost(h, 0, c, 0, n))
	require.NoError(t, e.a.Synchronize())
	want := pattern(n, 3)
	fill(want[:n/2], 0x77)
	require.Equal(t, want, h.Bytes())
	require.Equal(t, make([]byte, n), download(t, e.a, b, 0, n))
	require.NoError(t, e.a.Free(b))
	require.NoError(t, e.a.Free(c))
	require.NoError(t, h.Close())
}

// allocSyncIsOneDriverMalloc: AllocSync is one synchronous driver
// allocation, its Free one synchronous driver free, and the pool is not
// involved.
func (s *suite) allocSyncIsOneDriverMalloc(t *testing.T) {
	e := s.env(t)
	before := e.spy.Snapshot()
	b, err := e.a.AllocSync(3000)
	require.NoError(t, err)
	assertCalls(t, e.spy, before, alloctest.MethodMalloc, 1)
	data := pattern(3000, 5)
	upload(t, e.a, b, 0, data)
	require.Equal(t, data, download(t, e.a, b, 0, 3000))
	require.NoError(t, e.a.Free(b))
	assertCalls(t, e.spy, before, alloctest.MethodFree, 1)
	assertCalls(t, e.spy, before, alloctest.MethodMallocAsync, 0)
	assert.Zero(t, e.a.Stats().LiveBuffers)
}

// poolReusesFreedBlocksAndTrimGivesBack: a freed block serves the next
// allocation of its size class with no driver call; Trim gives everything
// cached back to the driver.
func (s *suite) poolReusesFreedBlocksAndTrimGivesBack(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 4096)
	p := b.Ptr()
	require.NoError(t, e.a.Free(b))
	before, st := e.spy.Snapshot(), e.a.Stats()
	b = mustAlloc(t, e.a, 4000) // same size class
	assertNoDriverCall(t, e.spy, before)
	assert.Equal(t, p, b.Ptr(), "a freed block is reused")
	assert.Equal(t, st.PoolHits+1, e.a.Stats().PoolHits)
	require.NoError(t, e.a.Free(b))
	assert.Positive(t, e.a.Stats().BytesCached)
	before = e.spy.Snapshot()
	require.NoError(t, e.a.Trim())
	if s.expandable { // the small range's one chunk is unmapped
		assertCalls(t, e.spy, before, alloctest.MethodUnmapMemory, 1)
	} else {
		assertCalls(t, e.spy, before, alloctest.MethodFreeAsync, 1)
	}
	st = e.a.Stats()
	assert.Zero(t, st.BytesCached)
	assert.Zero(t, st.BytesReserved, "Trim gives everything cached back")
}

func (s *suite) hostBufferCountedUntilClosed(t *testing.T) {
	e := s.env(t)
	h := mustHost(t, e.a, 1000)
	assert.EqualValues(t, 1000, h.Size())
	st := e.a.Stats()
	assert.Equal(t, 1, st.HostBuffers)
	assert.EqualValues(t, 1000, st.HostBytes)
	require.NoError(t, h.Close())
	assert.Nil(t, h.Bytes(), "Bytes after Close")
	assert.Zero(t, e.a.Stats().HostBuffers)
}
