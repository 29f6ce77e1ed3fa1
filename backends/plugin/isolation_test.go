package plugin

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// crashBound is how soon every call must see a crash: the requirement.
// Detection is event driven (the host waits on the child's exit), measured
// at about 4 ms, so the bound holds even on a loaded CI machine under -race.
const crashBound = 100 * time.Millisecond

func TestCrashFailsInFlightAndLaterCalls(t *testing.T) {
	d, s := openStream(t, "plugin:faulty:malloc=exit-7,query=hang")

	inflight := make(chan error, 1)
	go func() { _, err := d.StreamQuery(s); inflight <- err }()
	time.Sleep(50 * time.Millisecond) // let the query reach the backend and hang there

	start := time.Now()
	_, err := d.Malloc(4096) // the backend exits with status 7
	require.ErrorIs(t, err, driver.ErrBackendCrashed)
	require.Contains(t, err.Error(), "exit status 7")
	assert.Less(t, time.Since(start), crashBound)

	select {
	case err := <-inflight:
		require.ErrorIs(t, err, driver.ErrBackendCrashed)
		require.Contains(t, err.Error(), "exit status 7")
	case <-time.After(crashBound):
		t.Fatal("the call in flight did not fail with the crash")
	}
	t.Logf("crash reported after %v", time.Since(start))

	start = time.Now()
	_, err = d.MallocAsync(10, s)
	require.ErrorIs(t, err, driver.ErrBackendCrashed, "later calls fail the same way")
	require.Contains(t, err.Error(), "exit status 7")
	assert.Less(t, time.Since(start), 50*time.Millisecond, "at once, without a round trip")
	requireGone(t, d.PID(), time.Second)

	require.NoError(t, d.Close(), "closing a crashed backend releases this side")
	require.ErrorIs(t, d.Close(), alloc.ErrClosed)

	// The engine reopens, here the next choice of its chain.
	o, err := backends.OpenString(ctx, "plugin:cpu;cpu")
	require.NoError(t, err)
	require.Equal(t, "plugin:cpu", o.Choice.Name)
	p, err := o.Driver.Malloc(4096)
	require.NoError(t, err)
	require.NoError(t, o.Driver.Free(p))
	require.NoError(t, o.Driver.Close())
}

func TestCrashSeenWithoutACall(t *testing.T) {
	d := open(t, "plugin:cpu")
	require.NoError(t, syscallKill(d.PID()))
	require.Eventually(t, func() bool {
		_, err := d.CreateStream()
		return err != nil
	}, crashBound, time.Millisecond)
	_, err := d.CreateStream()
	require.ErrorIs(t, err, driver.ErrBackendCrashed)
	require.Contains(t, err.Error(), "signal: killed")
}

func TestHungCallKillsBackend(t *testing.T) {
	const deadline = 200 * time.Millisecond
	d, s := openStream(t, "plugin:faulty:sync=hang,plugin.call_timeout=200ms")

	start := time.Now()
	err := d.StreamSynchronize(s)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, driver.ErrBackendHung)
	require.Contains(t, err.Error(), "200ms")
	assert.GreaterOrEqual(t, elapsed, deadline)
	assert.Less(t, elapsed, deadline+time.Second, "the caller gets control back at the deadline")
	requireGone(t, d.PID(), time.Second)

	_, err = d.StreamQuery(s)
	require.ErrorIs(t, err, driver.ErrBackendHung, "later calls say why the backend is gone")
}

func TestWatchdogAbortsHungBackend(t *testing.T) {
	// The allocator's watchdog (100 ms) fires long before the plugin's own
	// deadline (1 min): through driver.Aborter it kills the backend at once.
	d := open(t, "plugin:faulty:sync=hang,plugin.call_timeout=1m")
	a, err := alloc.New(d, alloc.Options{Watchdog: 100 * time.Millisecond})
	require.NoError(t, err)

	start := time.Now()
	err = a.Synchronize()
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), time.Second)
	requireGone(t, d.PID(), time.Second)

	require.Eventually(t, func() bool {
		_, err := a.AllocSync(100)
		return err != nil && !strings.Contains(err.Error(), "still stuck")
	}, 5*time.Second, 5*time.Millisecond, "the stuck call returned once the backend was killed")
	_, err = a.AllocSync(100)
	require.ErrorIs(t, err, driver.ErrBackendHung)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout, "the cause is kept")
}

func TestWatchdogBoundsHungCaptureBeginAndEnd(t *testing.T) {
	// A capture begin or end hung in the backend returns at the allocator's
	// watchdog (100 ms), not at the plugin's call deadline (1 min), and
	// the allocator answers meanwhile instead of waiting on its lock.
	for _, fault := range []string{"begin", "end"} {
		t.Run(fault, func(t *testing.T) {
			d := open(t, "plugin:faulty:"+fault+"=hang,plugin.call_timeout=1m")
			a, err := alloc.New(d, alloc.Options{Watchdog: 100 * time.Millisecond})
			require.NoError(t, err)
			if fault == "end" {
				require.NoError(t, a.BeginCapture(alloc.Global))
			}
			start := time.Now()
			if fault == "begin" {
				err = a.BeginCapture(alloc.Global)
			} else {
				_, err = a.EndCapture()
			}
			require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
			assert.Less(t, time.Since(start), time.Second)
			requireGone(t, d.PID(), time.Second)
			done := make(chan error, 1)
			go func() { _, err := a.Alloc(100); done <- err }()
			select {
			case err := <-done:
				require.Error(t, err)
			case <-time.After(time.Second):
				t.Fatal("Alloc waits behind the hung capture call")
			}
		})
	}
}

func TestHostKilledLeavesNoOrphan(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"=host")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	require.False(t, gone(child), "the backend runs while its host does")

	require.NoError(t, cmd.Process.Kill()) // SIGKILL: the host runs no cleanup
	_ = cmd.Wait()
	requireGone(t, child, 2*time.Second)
}

func TestCloseLeavesNoProcess(t *testing.T) {
	d := open(t, "plugin:cpu")
	pid := d.PID()
	require.False(t, gone(pid))
	require.NoError(t, d.Close())
	requireGone(t, pid, time.Second)
	_, err := d.CreateStream()
	require.ErrorIs(t, err, alloc.ErrClosed)
}
