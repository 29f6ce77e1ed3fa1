package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
