package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// pressure is the group of memory under pressure (docs/memory-pressure.md):
// the allocator's own memory limit, whatever the backend (plugin mode
// included: the driver never sees a request over it), a limit as a
// fraction of the device, the proactive release over a threshold, and
// the out-of-memory callback, outside and during a capture.
func (s *suite) pressure(t *testing.T) {
	runRules(t,
		rule{"Limit", s.limitBoundsReserved},
		rule{"LimitClimbsTheLadder", s.limitGivesCacheBack},
		rule{"Fraction", s.fractionOfTheDevice},
		rule{"Threshold", s.thresholdReleasesOldest},
		rule{"CallbackFreesAndRetries", s.callbackFreesAndRetries},
		rule{"CallbackNotReentrant", s.callbackNotReentrant},
		rule{"CallbackDuringCapture", s.callbackDuringCapture},
		rule{"FillToTheFraction", s.fillToTheFraction},
	)
}

// pressureChunk is a buffer size of the group: a segment of its own (over
// the pool's 10 MiB medium class), 2 MiB-rounded, so reserved counts
// whole buffers.
const pressureChunk = 12 << 20

// limitBoundsReserved: reserved never exceeds MemoryLimit; the request
// that would is refused with ErrOutOfMemory naming the limit and its key,
// by Alloc and AllocSync alike, and leaves the allocator usable.
func (s *suite) limitBoundsReserved(t *testing.T) {
	const limit = 5*pressureChunk + pressureChunk/2
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit})
	require.EqualValues(t, limit, e.a.Stats().MemoryLimit)
	var bufs []alloc.Buffer
	for range 5 {
		bufs = append(bufs, mustAlloc(t, e.a, pressureChunk))
		require.LessOrEqual(t, e.a.Stats().BytesReserved, int64(limit))
	}
	before := e.a.Stats().DriverAllocs
	_, err := e.a.Alloc(pressureChunk)
	requireLimitError(t, err, "memory_limit")
	_, err = e.a.AllocSync(pressureChunk)
	requireLimitError(t, err, "memory_limit")
	_, err = e.a.Alloc(limit + 1)
	requireLimitError(t, err, "larger than the memory limit")
	if !s.expandable { // a range maps the chunks that fit before the refusal
		assert.Equal(t, before, e.a.Stats().DriverAllocs, "a refused request reached the driver")
	}
	assert.LessOrEqual(t, e.a.Stats().BytesReserved, int64(limit))
	require.NoError(t, e.a.Free(bufs[0]))
	b := mustAlloc(t, e.a, pressureChunk) // the freed buffer's memory again
	for _, x := range append(bufs[1:], b) {
		require.NoError(t, e.a.Free(x))
	}
}

// requireLimitError asserts err is an out-of-memory whose message names
// the limit with what.
func requireLimitError(t *testing.T, err error, what string) {
	t.Helper()
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), what)
	require.Contains(t, err.Error(), "memory limit")
}

// limitGivesCacheBack: a request over the limit climbs the reclaim ladder
// first: cached memory goes back to the driver and the request is served.
func (s *suite) limitGivesCacheBack(t *testing.T) {
	const limit = 3 * pressureChunk
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit})
	a := mustAlloc(t, e.a, 2*pressureChunk)
	require.NoError(t, e.a.Free(a)) // cached: reserved stays 2 chunks
	b, err := e.a.AllocSync(2 * pressureChunk)
	require.NoError(t, err, "the cache was not given back under the limit")
	c, err := e.a.Alloc(pressureChunk / 2)
	require.NoError(t, err)
	assert.LessOrEqual(t, e.a.Stats().BytesReserved, int64(limit))
	assert.Positive(t, e.a.Stats().ReclaimRetries)
	require.NoError(t, e.a.Free(b))
	require.NoError(t, e.a.Free(c))
}

// fractionOfTheDevice: MemoryFraction bounds reserved at that fraction of
// the total the driver reports (driver.MemInfoer), and the error names
// memory_fraction; a driver that cannot say refuses the option with
// errors.ErrUnsupported.
func (s *suite) fractionOfTheDevice(t *testing.T) {
	d := s.openDriver(t)
	mi, ok := d.(driver.MemInfoer)
	var total int64
	if ok {
		var err error
		_, total, err = mi.MemInfo()
		ok = err == nil && total > 0
	}
	const f = 0.5
	a, err := alloc.New(d, alloc.Options{MemoryFraction: f, Watchdog: testWatchdog})
	if !ok {
		require.ErrorIs(t, err, errors.ErrUnsupported)
		return
	}
	require.NoError(t, err)
	defer func() { assert.NoError(t, a.Close()) }()
	want := int64(f * float64(total))
	require.Equal(t, want, a.Stats().MemoryLimit)
	_, err = a.Alloc(want + 1)
	requireLimitError(t, err, "memory_fraction=0.5")
	_, err = alloc.New(d, alloc.Options{MemoryFraction: 1.5})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
}

// thresholdReleasesOldest: once growth takes reserved over GCThreshold of
// the limit, wholly free cached segments go back, least recently used
// first, until reserved is under the threshold again. (An earlier peak in
// use keeps the growth's own slack out of it: docs/allocator-core.md.)
func (s *suite) thresholdReleasesOldest(t *testing.T) {
	const limit = 14 * pressureChunk                                      // 168 MiB
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit, GCThreshold: 0.5}) // 84 MiB
	peak := mustAlloc(t, e.a, 100<<20)
	require.NoError(t, e.a.Free(peak))
	require.NoError(t, e.a.Trim()) // peak in use 100 MiB, nothing reserved
	ballast := mustAlloc(t, e.a, 40<<20)
	old := mustAlloc(t, e.a, pressureChunk)
	oldPtr := old.Ptr()
	// Freed first, before recent is allocated: that allocation moves the
	// per-P caches' blocks into the pool, so old is the least recently
	// used whichever P each call ran on (frees made on different Ps
	// between two such moves reach the pool in the Ps' order:
	// docs/memory-pressure.md).
	require.NoError(t, e.a.Free(old))
	recent := mustAlloc(t, e.a, pressureChunk+(2<<20)) // another size: its own segment
	recentPtr := recent.Ptr()
	require.NoError(t, e.a.Free(recent))
	big := mustAlloc(t, e.a, 2*pressureChunk) // fits no cached block: reserved 90 MiB, over 84
	st := e.a.Stats()
	assert.LessOrEqual(t, st.BytesReserved, int64(limit/2), "reserved stays over the threshold: %v", st)
	snap, err := e.a.Snapshot()
	require.NoError(t, err)
	var kept []driver.DevicePtr
	for _, sg := range snap.Segments {
		kept = append(kept, sg.Ptr)
	}
	if !s.expandable { // an expandable range unmaps chunks, not segments
		assert.NotContains(t, kept, oldPtr, "the least recently used segment was kept")
		assert.Contains(t, kept, recentPtr, "the most recently used segment went first")
	}
	require.NoError(t, e.a.Free(big))
	require.NoError(t, e.a.Free(ballast))
}

// callbackFreesAndRetries: at out-of-memory, the ladder climbed, the
// callback is told the request and the allocator's figures, frees a
// buffer of its own and asks for a retry, which is served.
func (s *suite) callbackFreesAndRetries(t *testing.T) {
	const limit = 3 * pressureChunk
	var (
		calls int
		info  alloc.OutOfMemoryInfo
		held  []alloc.Buffer
	)
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit, OnOutOfMemory: func(i alloc.OutOfMemoryInfo) bool {
		calls++
		info = i
		require.NoError(t, i.Allocator.Free(held[0]))
		held = held[1:]
		return true
	}})
	for range 3 {
		held = append(held, mustAlloc(t, e.a, pressureChunk))
	}
	b, err := e.a.Alloc(pressureChunk)
	require.NoError(t, err, "the retry after the callback's free failed")
	require.Equal(t, 1, calls)
	assert.Same(t, e.a, info.Allocator)
	assert.Equal(t, "Alloc", info.Op)
	assert.EqualValues(t, pressureChunk, info.Size)
	assert.EqualValues(t, limit, info.Limit)
	assert.EqualValues(t, 3*pressureChunk, info.InUse)
	assert.EqualValues(t, 3*pressureChunk, info.Reserved)
	assert.False(t, info.Capturing)
	require.ErrorIs(t, info.Err, alloc.ErrOutOfMemory)
	b2, err := e.a.AllocSync(pressureChunk) // AllocSync's path: the same callback
	require.NoError(t, err)
	require.Equal(t, 2, calls)
	for _, x := range append(held, b, b2) {
		require.NoError(t, e.a.Free(x))
	}
}

// callbackNotReentrant: an allocation the callback makes that runs out of
// memory fails without calling it again, and a retry that fails returns
// the usual error, the callback called once.
func (s *suite) callbackNotReentrant(t *testing.T) {
	const limit = 2 * pressureChunk
	var calls int
	var inner error
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit, OnOutOfMemory: func(i alloc.OutOfMemoryInfo) bool {
		calls++
		_, inner = i.Allocator.Alloc(pressureChunk)
		return true // nothing was freed: the retry fails
	}})
	b := mustAlloc(t, e.a, 2*pressureChunk)
	_, err := e.a.Alloc(pressureChunk)
	requireLimitError(t, err, "memory_limit")
	require.Equal(t, 1, calls, "the callback was called again for its own allocation or the retry")
	requireLimitError(t, inner, "memory_limit")
	require.NoError(t, e.a.Free(b))
}

// callbackDuringCapture: during a capture of the allocator's the callback
// is called, told so; a retry can only use what the capture may: a
// buffer from before the capture that the callback frees is held by the
// capture, so the retry fails, and the memory is back once the graph
// closes.
func (s *suite) callbackDuringCapture(t *testing.T) {
	const limit = 3 * pressureChunk
	var calls int
	var capturing bool
	var pre alloc.Buffer
	e := s.newEnv(t, alloc.Options{MemoryLimit: limit, OnOutOfMemory: func(i alloc.OutOfMemoryInfo) bool {
		calls++
		capturing = i.Capturing
		require.NoError(t, i.Allocator.Free(pre))
		return true
	}})
	pre = mustAlloc(t, e.a, 2*pressureChunk)
	var inCapture error
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error {
		_, inCapture = e.a.Alloc(2 * pressureChunk)
		return nil
	})
	if errors.Is(err, driver.ErrCaptureUnavailable) {
		t.Skip("the backend cannot capture")
	}
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	assert.True(t, capturing, "the callback was not told of the capture")
	requireLimitError(t, inCapture, "memory_limit")
	require.NoError(t, g.Close())
	b := mustAlloc(t, e.a, 2*pressureChunk) // the freed buffer's memory, released with the graph
	require.NoError(t, e.a.Free(b))
}

// fillToTheFraction is the GPU kit's pressure step (docs/gpu-kit.md):
// with memory_fraction=0.05 of the device the driver reports, buffers of
// a sixteenth of the limit fill it; the next is refused with an error
// naming the limit and memory_fraction; a callback then frees one and the
// retry is served. Where the driver cannot tell the device's total,
// Fraction checks the refusal instead.
func (s *suite) fillToTheFraction(t *testing.T) {
	d := s.openDriver(t)
	if mi, ok := d.(driver.MemInfoer); !ok {
		t.Skip("the driver cannot tell the device's total (driver.MemInfoer): Fraction checks New's refusal")
	} else if _, total, err := mi.MemInfo(); err != nil || total <= 0 {
		t.Skipf("the driver cannot tell the device's total now (%v): Fraction checks New's refusal", err)
	}
	var held []alloc.Buffer
	calls := 0
	a, err := alloc.New(d, alloc.Options{MemoryFraction: 0.05, Watchdog: testWatchdog, OnOutOfMemory: func(i alloc.OutOfMemoryInfo) bool {
		calls++
		if calls == 1 {
			return false // the first refusal is the one checked below
		}
		require.NoError(t, i.Allocator.Free(held[len(held)-1]))
		held = held[:len(held)-1]
		return true
	}})
	require.NoError(t, err)
	defer func() { assert.NoError(t, a.Close()) }()
	limit := a.Stats().MemoryLimit
	chunk := max(limit/16&^(2<<20-1), 2<<20)
	var refused error
	for refused == nil {
		var b alloc.Buffer
		if b, refused = a.Alloc(chunk); refused == nil {
			held = append(held, b)
			require.LessOrEqual(t, a.Stats().BytesReserved, limit)
		}
	}
	requireLimitError(t, refused, "memory_fraction=0.05")
	require.NotEmpty(t, held, "not one buffer of %d B fit in the limit of %d B", chunk, limit)
	t.Logf("limit %d B (memory_fraction=0.05): %d buffers of %d B; refused: %v", limit, len(held), chunk, refused)
	b, err := a.Alloc(chunk)
	require.NoError(t, err, "the retry after the callback's free")
	require.Equal(t, 2, calls)
	for _, x := range append(held, b) {
		require.NoError(t, a.Free(x))
	}
}
