package prog

import (
	"flag"
	"fmt"

	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	_ "github.com/capalloc/capalloc/cpu" // every backend of the module, registered with package backends
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
)

// BackendFlag defines -backend on the default flag set, cpu by default,
// its help listing the registered backends. It first hands the process to
// the plugin server when it was started as a plugin child, so that
// -backend=plugin:NAME can run the program's own binary as its backend
// process: call it before anything else in main.
func BackendFlag() *string {
	plugin.ServeIfChild()
	return flag.String("backend", "cpu", "backend ("+fmt.Sprint(backends.Names())+")")
}
