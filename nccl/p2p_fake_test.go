package nccl_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// The stand-in's never-completes modes (testdata/fakenccl.c, FAKE_HANG_*).
const (
	hangNone     = 0
	hangBlock    = 1 // calls block until their communicator is aborted
	hangProgress = 2 // calls return ncclInProgress until it is aborted
)

// builds are the stand-in as NCCL and as RCCL: every test of the new
// surface runs against both.
var builds = []struct {
	name  string
	flags []string
	load  func(string) (*nccl.Library, error)
}{
	{"nccl", nil, nccl.LoadPath},
	{"rccl", []string{"-DFAKE_RCCL"}, nccl.LoadRCCLPath},
}

// eachBuild runs fn once per build of the stand-in, with extra flags.
func eachBuild(t *testing.T, fn func(t *testing.T, f *fake), extra ...string) {
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			l, err := b.load(buildFake(t, append(append([]string{}, b.flags...), extra...)...))
			require.NoError(t, err)
			fn(t, openFake(t, l))
		})
	}
}

// log returns the stand-in's call log since the last read.
func (f *fake) log(t *testing.T) string {
	buf := make([]byte, 1<<16)
	n := f.call(t, "fake_log", uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	return string(buf[:n])
}

func (f *fake) hang(t *testing.T, mode int) {
	f.call(t, "fake_hang", uintptr(mode))
}

// misuse counts calls the stand-in saw into destroyed or aborted
// communicators: it must stay 0.
func (f *fake) misuse(t *testing.T) int {
	n := f.call(t, "fake_misuse")
	return int(n)
}

// comm makes rank of ranks on the stand-in.
func (f *fake) comm(t *testing.T, rank, ranks int) *nccl.Comm {
	t.Helper()
	id, err := f.l.GetUniqueID()
	require.NoError(t, err)
	c, err := f.l.InitRank(&onCaller{}, ranks, id, rank)
	require.NoError(t, err)
	return c
}

// allocator is a cpu allocator in the library's capture domain, with the
// watchdog given, and two buffers of 64 int32s.
func allocator(t *testing.T, l *nccl.Library, watchdog time.Duration) (*alloc.Allocator, alloc.Buffer, alloc.Buffer) {
	t.Helper()
	domain := "cuda"
	if l.RCCL {
		domain = "hip"
	}
	a := domainAllocator(t, domain, alloc.Options{Watchdog: watchdog})
	x, err := a.Alloc(256)
	require.NoError(t, err)
	y, err := a.Alloc(256)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, errors.Join(a.Free(x), a.Free(y), a.Close()))
	})
	return a, x, y
}

// Send, Recv, Broadcast and Reduce reach NCCL with their peer or root and
// count, each outside any group (g=0); bad operands are typed errors with
// no call.
func TestPointToPointAndRootedCollectives(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		c := f.comm(t, 0, 2)
		a, x, y := allocator(t, f.l, time.Second)
		require.NoError(t, c.Send(a, x, 64, nccl.Int32, 1))
		require.NoError(t, c.Recv(a, y, 32, nccl.Float32, 1))
		require.NoError(t, c.Broadcast(a, x, y, 16, nccl.Int32, 1))
		require.NoError(t, c.Reduce(a, x, y, 8, nccl.Float32, nccl.Sum, 0))
		lines := strings.Split(strings.TrimSpace(f.log(t)), "\n")
		require.Len(t, lines, 4)
		for i, want := range []string{"send", "recv", "broadcast", "reduce"} {
			require.True(t, strings.HasPrefix(lines[i], want+" "), lines[i])
			require.Contains(t, lines[i], "rank=0")
			require.True(t, strings.HasSuffix(lines[i], " g=0"), lines[i])
		}
		require.Contains(t, lines[0], "peer=1 n=64")
		require.Contains(t, lines[1], "peer=1 n=32")
		require.Contains(t, lines[2], "peer=1 n=16")
		require.Contains(t, lines[3], "peer=0 n=8")

		require.ErrorIs(t, c.Send(a, x, 64, nccl.Int32, 2), alloc.ErrInvalidValue)
		require.ErrorIs(t, c.Recv(a, x, 64, nccl.Int32, -1), alloc.ErrInvalidValue)
		require.ErrorIs(t, c.Broadcast(a, x, y, 16, nccl.Int32, 5), alloc.ErrInvalidValue)
		require.ErrorIs(t, c.Reduce(a, x, y, 65, nccl.Int32, nccl.Sum, 0), alloc.ErrOutOfRange)
		require.ErrorIs(t, c.Send(a, x, 1, nccl.DataType(99), 0), alloc.ErrInvalidValue)
		require.Empty(t, f.log(t), "refused before any NCCL call")
		require.NoError(t, c.Destroy())
		require.ErrorIs(t, c.Send(a, x, 1, nccl.Int32, 0), alloc.ErrClosed)
		require.Zero(t, f.misuse(t))
	})
}

// A Group's operations, on several communicators, are one NCCL group
// (the same g, then its end), even with goroutines rescheduled between
// them: the group holds its thread, where NCCL keeps group state (the
// stand-in's is thread-local too). Many groups run at once.
func TestGroupHoldsItsThread(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		const workers, rounds = 8, 20
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c1, c2 := f.comm(t, 0, 1), f.comm(t, 0, 2)
				a, x, y := allocator(t, f.l, time.Second)
				for range rounds {
					err := f.l.Group(func() error {
						if err := c1.Send(a, x, 4, nccl.Int32, 0); err != nil {
							return err
						}
						runtime.Gosched()
						time.Sleep(10 * time.Microsecond)
						if err := c1.Recv(a, y, 4, nccl.Int32, 0); err != nil {
							return err
						}
						runtime.Gosched()
						return c2.Broadcast(a, x, y, 4, nccl.Int32, 0)
					})
					if err != nil {
						errs[w] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		ops, ends := map[string]int{}, map[string]bool{}
		for line := range strings.SplitSeq(strings.TrimSpace(f.log(t)), "\n") {
			g := line[strings.LastIndex(line, "g=")+2:]
			require.NotEqual(t, "0", g, "an operation outside its group: %s", line)
			if strings.HasPrefix(line, "end ") {
				require.Equal(t, 3, ops[g], "group %s ended with %d operations", g, ops[g])
				ends[g] = true
				continue
			}
			require.False(t, ends[g], "an operation after its group ended: %s", line)
			ops[g]++
		}
		require.Len(t, ends, workers*rounds)
	})
}

// An error or a panic inside the function still ends the group: the next
// group is a fresh outermost one, not nested in a group never ended.
func TestGroupEndsOnErrorAndPanic(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		c := f.comm(t, 0, 1)
		a, x, _ := allocator(t, f.l, time.Second)
		boom := errors.New("stage failed")
		err := f.l.Group(func() error {
			require.NoError(t, c.Send(a, x, 4, nccl.Int32, 0))
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Regexp(t, `^send .* g=(\d+)\nend g=\d+\n$`, f.log(t))
		require.Panics(t, func() {
			_ = f.l.Group(func() error { panic("stage panicked") })
		})
		require.Equal(t, "end g=2\n", f.log(t))
		// Nested groups: one end launches.
		require.NoError(t, f.l.Group(func() error {
			return f.l.Group(func() error { return c.Recv(a, x, 4, nccl.Int32, 0) })
		}))
		require.Regexp(t, `^recv .* g=3\nend g=3\n$`, f.log(t))
		require.ErrorIs(t, f.l.Group(nil), alloc.ErrInvalidValue)
	})
}

// Split passes color and key and a NULL config, and the new communicator
// has the rank and size NCCL reports; NoColor joins none; it is refused
// during a Global capture with no call; without ncclCommSplit it is
// ErrNoSplit.
func TestSplit(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		require.True(t, f.l.HasSplit())
		c := f.comm(t, 1, 4)
		s, err := c.Split(3, 7)
		require.NoError(t, err)
		require.Equal(t, 1, s.Rank())
		require.Equal(t, 4, s.Ranks())
		require.Regexp(t, `^split comm=\d+ color=3 key=7 config=0\n$`, f.log(t))
		a, x, _ := allocator(t, f.l, time.Second)
		require.NoError(t, s.Send(a, x, 4, nccl.Int32, 0))
		require.Contains(t, f.log(t), "send ")
		none, err := c.Split(nccl.NoColor, 0)
		require.NoError(t, err)
		require.Nil(t, none)
		f.log(t)
		_, err = c.Split(-2, 0)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)

		require.NoError(t, a.BeginCapture(alloc.Global))
		_, err = c.Split(0, 0)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		g, err := a.EndCapture()
		require.NoError(t, err)
		require.NoError(t, g.Close())
		require.Empty(t, f.log(t), "no call during the capture")
		require.NoError(t, errors.Join(s.Destroy(), c.Destroy()))
	})
	eachBuild(t, func(t *testing.T, f *fake) {
		require.False(t, f.l.HasSplit())
		_, err := f.comm(t, 0, 1).Split(0, 0)
		require.ErrorIs(t, err, nccl.ErrNoSplit)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), "2.18")
	}, "-DFAKE_NO_SPLIT")
}

// requireAborted checks that err is the timeout naming op and c, and
// that c is unusable afterwards with no call into it.
func requireAborted(t *testing.T, f *fake, err error, op string, c *nccl.Comm, a *alloc.Allocator, x alloc.Buffer) {
	t.Helper()
	require.ErrorIs(t, err, nccl.ErrCollectiveTimeout)
	require.Contains(t, err.Error(), op)
	require.Contains(t, err.Error(), fmt.Sprintf("rank %d of %d", c.Rank(), c.Ranks()))
	f.hang(t, hangNone)
	require.ErrorIs(t, c.Send(a, x, 4, nccl.Int32, 0), nccl.ErrCommAborted)
	require.ErrorIs(t, c.Send(a, x, 4, nccl.Int32, 0), alloc.ErrClosed)
	_, err = c.Split(0, 0)
	require.ErrorIs(t, err, nccl.ErrCommAborted)
	require.ErrorIs(t, c.Wait(a), nccl.ErrCommAborted)
	require.NoError(t, c.Destroy(), "freed by the abort")
	require.NoError(t, c.Abort())
	require.Zero(t, f.misuse(t), "no call into an aborted communicator")
}

// A collective whose peers never answer does not hang: a blocking
// communicator's call is aborted at the allocator's watchdog timeout, a
// nonblocking one's ncclInProgress is polled until then; either way the
// result is ErrCollectiveTimeout naming the call and the communicator,
// which is aborted and refuses every later call.
func TestCollectiveThatNeverCompletesIsAborted(t *testing.T) {
	for _, mode := range []struct {
		name string
		hang int
	}{{"blocking", hangBlock}, {"nonblocking", hangProgress}} {
		t.Run(mode.name, func(t *testing.T) {
			eachBuild(t, func(t *testing.T, f *fake) {
				c := f.comm(t, 0, 2)
				a, x, y := allocator(t, f.l, 150*time.Millisecond)
				f.hang(t, mode.hang)
				start := time.Now()
				err := c.AllReduce(a, x, y, 4, nccl.Int32, nccl.Sum)
				require.Less(t, time.Since(start), 5*time.Second)
				requireAborted(t, f, err, "ncclAllReduce", c, a, x)
			})
		})
	}
}

// A group whose end never completes aborts every communicator it used.
func TestGroupThatNeverCompletesIsAborted(t *testing.T) {
	for _, hang := range []int{hangBlock, hangProgress} {
		eachBuild(t, func(t *testing.T, f *fake) {
			c1, c2 := f.comm(t, 0, 2), f.comm(t, 1, 2)
			a, x, y := allocator(t, f.l, 150*time.Millisecond)
			f.hang(t, hang)
			err := f.l.Group(func() error {
				return errors.Join(c1.Send(a, x, 4, nccl.Int32, 1), c2.Recv(a, y, 4, nccl.Int32, 0))
			})
			requireAborted(t, f, err, "ncclGroupEnd", c1, a, x)
			require.ErrorIs(t, c2.Recv(a, y, 4, nccl.Int32, 0), nccl.ErrCommAborted)
			require.Zero(t, f.misuse(t))
		})
	}
}

// A split whose peers never join is bounded by the communicator's timeout.
func TestSplitThatNeverCompletesIsAborted(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		c := f.comm(t, 0, 2)
		a, x, _ := allocator(t, f.l, time.Second)
		c.SetTimeout(100 * time.Millisecond)
		f.hang(t, hangBlock)
		_, err := c.Split(0, 0)
		requireAborted(t, f, err, "ncclCommSplit", c, a, x)
	})
}

// Wait returns once the stream's work is done; work that never finishes
// (a host function blocked on the stream, standing for a kernel waiting on
// a dead peer) is ErrCollectiveTimeout at the allocator's watchdog, and
// the communicator is aborted.
func TestWaitAbortsAtTheWatchdog(t *testing.T) {
	eachBuild(t, func(t *testing.T, f *fake) {
		c := f.comm(t, 0, 2)
		a, x, y := allocator(t, f.l, 150*time.Millisecond)
		require.NoError(t, c.AllReduce(a, x, y, 4, nccl.Int32, nccl.Sum))
		require.NoError(t, c.Wait(a))

		release := make(chan struct{})
		require.NoError(t, a.LaunchHostFunc(func() error { <-release; return nil }))
		err := c.Wait(a)
		close(release)
		require.Eventually(t, func() bool { return a.Synchronize() == nil }, 5*time.Second, 10*time.Millisecond)
		requireAborted(t, f, err, "wait", c, a, x)

		// A nonblocking communicator still in progress when the stream is
		// done is waited for too, to the same end.
		c = f.comm(t, 0, 2)
		f.hang(t, hangProgress)
		requireAborted(t, f, c.Wait(a), "wait", c, a, x)
	})
}
