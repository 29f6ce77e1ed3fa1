package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
