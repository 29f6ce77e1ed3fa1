package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/probe"
)

// pattern is n deterministic bytes that differ for every seed, so a stale or
// misplaced copy shows up as a mismatch.
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// diffBytes says where got first differs from want, and how; nil when
// they are equal.
func diffBytes(got, want []byte) error {
	i := probe.FirstDiff(got, want)
	switch {
	case i < 0:
		return nil
	case i >= len(got) || i >= len(want):
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	return fmt.Errorf("first difference at byte %d (got %#x, want %#x)", i, got[i], want[i])
}

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// repeat is n copies of v.
func repeat(v byte, n int) []byte {
	b := make([]byte, n)
	fill(b, v)
	return b
}

// upload writes data to b at off eagerly (pageable copy).
func upload(t *testing.T, a *alloc.Allocator, b alloc.Buffer, off int64, data []byte) {
	t.Helper()
	require.NoError(t, a.Upload(b, off, data))
}

// download reads n bytes of b from off eagerly (pageable copy, which waits
// for everything queued before it).
func download(t *testing.T, a *alloc.Allocator, b alloc.Buffer, off, n int64) []byte {
	t.Helper()
	out := make([]byte, n)
	require.NoError(t, a.Download(out, b, off))
	return out
}

// mustAlloc allocates n bytes outside any capture.
func mustAlloc(t *testing.T, a *alloc.Allocator, n int64) alloc.Buffer {
	t.Helper()
	b, err := a.Alloc(n)
	require.NoError(t, err)
	return b
}

// assertReused asserts that the pool hands p's memory out again, to an
// allocation of n bytes, with no driver call: memory released for reuse
// is in the pool. Which allocation gets it first is the pool's choice (a
// goroutine that moved to another P meets that P's cache first), so up
// to reuseTries allocations are made, and all are freed.
func assertReused(t *testing.T, e *env, p driver.DevicePtr, n int64, msg string) {
	t.Helper()
	before := e.spy.Snapshot()
	var bs []alloc.Buffer
	found := false
	for len(bs) < reuseTries && !found {
		b := mustAlloc(t, e.a, n)
		bs = append(bs, b)
		found = b.Ptr() == p
	}
	assertNoDriverCall(t, e.spy, before)
	freeAll(t, e.a, bs)
	assert.True(t, found, "%s: none of %d allocations of %d B got %#x", msg, len(bs), n, p)
}

// freeAll frees every buffer of bs on a.
func freeAll(t *testing.T, a *alloc.Allocator, bs []alloc.Buffer) {
	t.Helper()
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
}

// reuseTries is more blocks than the pool caches unmerged (recent and one
// shard per P) for the few sizes a test uses.
const reuseTries = 64

// allocThenFree allocates n bytes with allocate (a's Alloc or AllocSync)
// and frees them: a driver call each way that a capture may refuse.
func allocThenFree(allocate func(n int64) (alloc.Buffer, error), a *alloc.Allocator, n int64) error {
	x, err := allocate(n)
	if err != nil {
		return err
	}
	return a.Free(x)
}

// hostAllocThenClose allocates n bytes of pinned memory on a and closes
// them.
func hostAllocThenClose(a *alloc.Allocator, n int64) error {
	h, err := a.HostAlloc(n)
	if err != nil {
		return err
	}
	return h.Close()
}

// mustHost allocates n bytes of pinned memory.
func mustHost(t *testing.T, a *alloc.Allocator, n int64) *alloc.HostBuffer {
	t.Helper()
	h, err := a.HostAlloc(n)
	require.NoError(t, err)
	require.EqualValues(t, n, len(h.Bytes()))
	return h
}

// requireState asserts the allocator reports st (asking the driver).
func requireState(t *testing.T, a *alloc.Allocator, st alloc.CaptureState) {
	t.Helper()
	got, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, st.String(), got.String(), "capture state")
}

// requireRefused asserts err wraps every sentinel and carries the capture
// state the allocator saw, as every alloc error must.
func requireRefused(t *testing.T, err error, st alloc.CaptureState, sentinels ...error) {
	t.Helper()
	require.Error(t, err)
	for _, s := range sentinels {
		require.ErrorIs(t, err, s)
	}
	var ae *alloc.Error
	require.True(t, errors.As(err, &ae), "error %q is not an *alloc.Error", err)
	assert.Equal(t, st.String(), ae.State.String(), "capture state recorded in the error")
}

// strictSafety reports whether a's driver has strict capture safety
// (docs/capture-safety.md): it refuses unsafe calls, and a graph's
// instantiation, during a capture of any mode, Relaxed included.
func strictSafety(a *alloc.Allocator) bool {
	return a.Info().CaptureSafety == driver.SafetyStrict
}

// requireStrictRefusal asserts err is strict capture safety's refusal:
// driver.ErrCaptureIllegalOp, with a message that names the profile.
func requireStrictRefusal(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "strict safety's refusal")
	assert.Contains(t, err.Error(), "capture safety is strict", "the error names the profile")
}

// assertNoDriverCall asserts that nothing but capture-status queries reached
// the driver since before: the guard refused before calling it.
func assertNoDriverCall(t *testing.T, spy *alloctest.Spy, before alloctest.Counts) {
	t.Helper()
	d := spy.Snapshot().Sub(before)
	assert.Zero(t, d.Total(alloctest.MethodStreamCaptureStatus), "driver calls made by a refused operation: %s", d)
}

// assertNoDeviceAllocation asserts that no device memory was allocated
// since before: neither cudaMallocAsync nor cudaMalloc was called.
func assertNoDeviceAllocation(t *testing.T, spy *alloctest.Spy, before alloctest.Counts) {
	t.Helper()
	assertCalls(t, spy, before, alloctest.MethodMallocAsync, 0)
	assertCalls(t, spy, before, alloctest.MethodMalloc, 0)
}

// assertCalls asserts that m was called exactly n times since before.
func assertCalls(t *testing.T, spy *alloctest.Spy, before alloctest.Counts, m alloctest.Method, n int64) {
	t.Helper()
	d := spy.Snapshot().Sub(before)
	assert.Equal(t, n, d[m], "%s calls (all calls: %s)", m, d)
}

// overlaps reports whether [a, a+an) and [b, b+bn) share a byte.
func overlaps(a driver.DevicePtr, an int64, b driver.DevicePtr, bn int64) bool {
	return uint64(a) < uint64(b)+uint64(bn) && uint64(b) < uint64(a)+uint64(an)
}

// sizeName is a short subtest name for a byte count.
func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) != 0:
		return itoa(n>>20) + "MiB+" + itoa(n%(1<<20))
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// invalidateCapture makes the driver invalidate a's capture: a stream
// query, illegal during a capture, made behind the allocator's back. It
// returns an error if the driver did not refuse the query; it makes no
// test assertion, so a captured function may call it.
func invalidateCapture(spy *alloctest.Spy, a *alloc.Allocator) error {
	if _, err := spy.Inner().StreamQuery(a.Stream()); !errors.Is(err, driver.ErrCaptureIllegalOp) {
		return fmt.Errorf("invalidating the capture: the driver answered a stream query with %v, not %v", err, driver.ErrCaptureIllegalOp)
	}
	return nil
}

// invalidate is invalidateCapture on the test's goroutine.
func invalidate(t *testing.T, e *env, a *alloc.Allocator) {
	t.Helper()
	require.NoError(t, invalidateCapture(e.spy, a))
}

// inExternalCapture runs fn while a capture the allocator did not start
// (begun on the driver behind its back, in mode) records its stream, then
// ends that capture and destroys its graph.
func (e *env) inExternalCapture(mode alloc.CaptureMode, fn func()) {
	e.t.Helper()
	require.NoError(e.t, e.spy.Inner().BeginCapture(e.a.Stream(), mode))
	fn()
	h, err := e.spy.Inner().EndCapture(e.a.Stream())
	require.NoError(e.t, err)
	require.NoError(e.t, e.spy.Inner().GraphDestroy(h))
}
