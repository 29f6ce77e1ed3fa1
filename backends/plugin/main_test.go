package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu"
)

// envRole makes a re-executed test binary play a part instead of running
// the tests: "host" opens plugin:cpu, prints the child's pid and waits to be
// killed (for the orphan test).
const envRole = "CAPALLOC_PLUGIN_TEST_ROLE"

func TestMain(m *testing.M) {
	ServeIfChild()
	if os.Getenv(envRole) == "host" {
		os.Exit(helperHost())
	}
	os.Exit(m.Run())
}

var ctx = context.Background()

func open(t *testing.T, cfg string) *Driver {
	t.Helper()
	d, err := backends.OpenDriver(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d.(*Driver) // whatever the backend: one host type
}

// openStream is open with a stream created on the driver.
func openStream(t *testing.T, cfg string) (*Driver, driver.Stream) {
	t.Helper()
	d := open(t, cfg)
	s, err := d.CreateStream()
	require.NoError(t, err)
	return d, s
}

// gone reports whether pid no longer runs (absent, or a zombie nobody
// reaped: a container's init may not reap reparented children).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func requireGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("backend process %d still running after %v", pid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cpuWithout opens a cpu driver with o less keys, whose values are
// returned: a test backend that wraps cpu takes its own options so.
func cpuWithout(ctx context.Context, o driver.Options, mem driver.Memory, keys ...string) (driver.Driver, map[string]string, error) {
	own := map[string]string{}
	inner := o.Clone()
	for _, k := range keys {
		if v, ok := o[k]; ok {
			own[k] = v
			delete(inner, k)
		}
	}
	d, err := backends.Choice{Name: "cpu", Options: inner, Memory: mem}.Open(ctx)
	return d, own, err
}

func helperHost() int {
	d, err := backends.OpenDriver(context.Background(), "plugin:cpu")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "%d\n", d.(interface{ PID() int }).PID())
	w.Flush()
	time.Sleep(time.Minute) // killed by the test long before
	return 0
}
