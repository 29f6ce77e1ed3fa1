package alloc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Both allocation paths give the pool's cache back to the driver and retry
// once when the device is out of memory: memory the allocator merely
// caches must never make an allocation fail.
func TestOutOfMemoryGivesCacheBack(t *testing.T) {
	const limit = 1 << 20
	for _, path := range []string{"Alloc", "AllocSync"} {
		t.Run(path, func(t *testing.T) {
			a := fullOfCache(t, limit)
			var err error

			var b alloc.Buffer
			if path == "Alloc" {
				b, err = a.Alloc(limit / 2)
			} else {
				b, err = a.AllocSync(limit / 2)
			}
			require.NoError(t, err, "the cache was not given back before failing")
			require.NoError(t, a.Free(b))
		})
	}
}

// An error of earlier stream work that surfaces while an out-of-memory
// AllocSync gives the cache back (at its synchronize) is reported with the
// out-of-memory, both matchable, not swallowed: it is the engine's bug.
func TestAllocSyncGiveBackReportsAsyncError(t *testing.T) {
	const limit = 1 << 20
	a := fullOfCache(t, limit)
	boom := errors.New("kernel failed")
	require.NoError(t, a.LaunchHostFunc(func() error { return boom }))
	_, err := a.AllocSync(limit / 2)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.ErrorIs(t, err, boom, "the stream's error is not hidden behind the out-of-memory")
	require.NoError(t, a.Synchronize(), "reported once")
	b, err := a.AllocSync(limit / 2) // the cache was given back meanwhile
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
}

// fullOfCache returns an allocator on a cpu device of limit bytes whose
// memory is all held by the pool's cache: blocks of limit/8 allocated until
// the device ran out, then freed. Both are closed when the test ends.
func fullOfCache(t *testing.T, limit int64) *alloc.Allocator {
	t.Helper()
	_, a := newCPUAllocator(t, limit)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	var bs []alloc.Buffer
	for {
		b, err := a.Alloc(limit / 8)
		if err != nil {
			require.ErrorIs(t, err, alloc.ErrOutOfMemory)
			break
		}
		bs = append(bs, b)
	}
	require.NotEmpty(t, bs)
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
	require.Positive(t, a.Stats().BytesCached)
	return a
}

// An out-of-memory error says, once, what a person needs to act
// (PyTorch's message is the model): the request in bytes and in words, the
// allocator's name, the device's total and free memory, what the
// allocator has in use, reserved and cached, its largest free block, and
// the driver's words without the sentinel's text again; Stats counts it.
// Every allocation path says the same.
func TestOutOfMemoryMessage(t *testing.T) {
	paths := map[string]func(a *alloc.Allocator, n int64) error{
		"Alloc":     func(a *alloc.Allocator, n int64) error { _, err := a.Alloc(n); return err },
		"AllocSync": func(a *alloc.Allocator, n int64) error { _, err := a.AllocSync(n); return err },
		"Workspace": func(a *alloc.Allocator, n int64) error { _, err := a.Workspace("ws", n); return err },
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			a := cpuAllocatorWith(t, 8<<20, alloc.Options{Name: "engine-" + name})
			b, err := a.Alloc(3 << 20)
			require.NoError(t, err)
			err = path(a, 6<<20)
			require.ErrorIs(t, err, alloc.ErrOutOfMemory)
			msg := err.Error()
			require.Equal(t, 1, strings.Count(msg, "out of device memory"), msg)
			for _, part := range []string{
				"tried to allocate 6.00 MiB (6291456 B)",
				`in allocator "engine-` + name + `" (cpu)`,
				"device 8.00 MiB total, 5.00 MiB free",
				"3.00 MiB in use, 3.00 MiB reserved, 0 B of it cached, largest free block 0 B",
				"; driver: cpu: malloc",
			} {
				require.Contains(t, msg, part)
			}
			require.NotContains(t, msg, "hint")
			require.NotContains(t, msg, "(6291456 B) [capture", "the request's size is said once, by the message")
			require.Equal(t, uint64(1), a.Stats().OutOfMemory)

			err = path(a, 60<<20)
			require.ErrorIs(t, err, alloc.ErrOutOfMemory)
			require.Contains(t, err.Error(), "tried to allocate 60.00 MiB (62914560 B)")
			require.Contains(t, err.Error(), "; the request is larger than the whole device")
			require.Equal(t, uint64(2), a.Stats().OutOfMemory)
			require.NoError(t, a.Free(b))
		})
	}
}

// A driver that cannot tell its free memory (no driver.MemInfoer) gets a
// message without it.
func TestOutOfMemoryMessageWithoutMemInfo(t *testing.T) {
	d := newCPU(t, 8<<20)
	a, err := alloc.New(struct{ driver.Driver }{d}, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	_, err = a.Alloc(9 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "device 8.00 MiB total; this allocator")
}

// Cached memory that would hold the request were it one piece gets a
// hint: free blocks in pieces merge under expandable segments.
func TestOutOfMemoryHintsExpandableSegments(t *testing.T) {
	a := cpuAllocatorWith(t, 8<<20, alloc.Options{})
	var bs []alloc.Buffer
	for range 8 { // four small segments of 2 MiB, the device full
		b, err := a.Alloc(1 << 20)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for i := 0; i < len(bs); i += 2 { // 1 MiB free in each segment
		require.NoError(t, a.Free(bs[i]))
	}
	_, err := a.Alloc(2 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	msg := err.Error()
	require.Contains(t, msg, "4.00 MiB of it cached, largest free block 1.00 MiB")
	require.Contains(t, msg, "hint: 4.00 MiB is cached, enough for the request but in pieces: expandable segments")
	require.Contains(t, msg, "Options.ExpandableSegments")
	for i := 1; i < len(bs); i += 2 {
		require.NoError(t, a.Free(bs[i]))
	}
}

// During a capture the allocation comes from the driver, and the ladder
// does not give the pool's cache back: wholly free segments still cached
// get a hint to Trim outside captures. (The cpu driver invalidates the
// Global capture whose allocation failed.)
func TestOutOfMemoryInCaptureHintsTrim(t *testing.T) {
	a := cpuAllocatorWith(t, 8<<20, alloc.Options{})
	var bs []alloc.Buffer
	for range 4 { // two small segments of 2 MiB
		b, err := a.Alloc(1 << 20)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
	require.NoError(t, a.BeginCapture(alloc.Global))
	_, err := a.Alloc(6 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "hint: 4.00 MiB of wholly free segments is still cached: Trim, outside captures, gives it back to the driver")
	_, err = a.EndCapture()
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.NoError(t, a.Trim())
	b, err := a.Alloc(6 << 20)
	require.NoError(t, err, "what the hint said")
	require.NoError(t, a.Free(b))
}

// Stats counts the reclaim ladder's retries, and an out-of-memory only
// when the ladder could not make room.
func TestOutOfMemoryCountsRetries(t *testing.T) {
	const limit = 1 << 20
	a := fullOfCache(t, limit)
	before := a.Stats()
	b, err := a.AllocSync(limit / 2)
	require.NoError(t, err)
	after := a.Stats()
	require.Greater(t, after.ReclaimRetries, before.ReclaimRetries, "the ladder gave the cache back and retried")
	require.Equal(t, before.OutOfMemory, after.OutOfMemory, "a retry that succeeded is no out-of-memory")
	_, err = a.AllocSync(limit/2 + 4096)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Equal(t, before.OutOfMemory+1, a.Stats().OutOfMemory)
	require.NoError(t, a.Free(b))
}

// noVM is a driver without virtual memory management, as plugin mode's
// host driver is: it refuses expandable segments.
type noVM struct{ driver.Driver }

// The expandable-segments hint names the CAPALLOC_ALLOC_CONF key, and is
// given only where the driver could back expandable segments: never where
// the option would be refused.
func TestOutOfMemoryHintsOnlyWhatCanHelp(t *testing.T) {
	fragment := func(a *alloc.Allocator) error {
		var bs []alloc.Buffer
		for range 8 { // four small segments of 2 MiB, the device full
			b, err := a.Alloc(1 << 20)
			require.NoError(t, err)
			bs = append(bs, b)
		}
		for i := 0; i < len(bs); i += 2 {
			require.NoError(t, a.Free(bs[i]))
		}
		_, err := a.Alloc(2 << 20)
		for i := 1; i < len(bs); i += 2 {
			require.NoError(t, a.Free(bs[i]))
		}
		return err
	}
	err := fragment(cpuAllocatorWith(t, 8<<20, alloc.Options{}))
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "set CAPALLOC_ALLOC_CONF=expandable_segments:True (Options.ExpandableSegments)")

	d := newCPU(t, 8<<20)
	_, err = alloc.New(noVM{d}, alloc.Options{ExpandableSegments: true})
	require.ErrorIs(t, err, errors.ErrUnsupported, "the driver refuses what the hint would suggest")
	a, err := alloc.New(noVM{d}, alloc.Options{})
	require.NoError(t, err)
	err = fragment(a)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NotContains(t, err.Error(), "expandable", "a hint the driver cannot follow")
	require.NoError(t, a.Close())
}

// An out-of-memory inside a capture says what to do: warm up before
// capturing, capture into a graph pool; inside a pool's capture, warm up
// at the largest size.
func TestOutOfMemoryInCaptureSaysWhatToDo(t *testing.T) {
	a := cpuAllocatorWith(t, 8<<20, alloc.Options{})
	keep, err := a.Alloc(1 << 20) // a segment in use: nothing wholly free to Trim
	require.NoError(t, err)
	_, err = a.WithCapture(alloc.CaptureOptions{}, func() error {
		_, err := a.Alloc(7 << 20)
		return err
	})
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	msg := err.Error()
	require.Contains(t, msg, "hint: the request was made inside a capture, which takes memory from the driver (1.00 MiB stays cached meanwhile): warm up (run the step once eagerly) before capturing, and capture into a graph pool (CaptureOptions.Pool)")
	require.NotContains(t, msg, "expandable", "expandable segments do not grow inside a capture")

	gp := a.NewGraphPool()
	_, err = a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
		_, err := a.Alloc(7 << 20)
		return err
	})
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "hint: the request was made inside a capture into a graph pool, which neither the pool nor the allocator's cache could serve: run the step once eagerly, at its largest size, before capturing")
	require.NoError(t, gp.Close())
	require.NoError(t, a.Free(keep))
}
