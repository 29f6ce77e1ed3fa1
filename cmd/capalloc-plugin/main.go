// Command capalloc-plugin is the backend process of plugin mode: a host
// that opens plugin:NAME starts it (see backends/plugin) and it serves the
// backends linked into it. Run by hand, it says so and exits.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	_ "github.com/capalloc/capalloc/cpu"  // registers "cpu"
	_ "github.com/capalloc/capalloc/cuda" // registers "cuda"; its library is loaded only when opened
	_ "github.com/capalloc/capalloc/hip"  // registers "hip"; likewise
)

func main() {
	plugin.ServeIfChild()
	fmt.Fprintf(os.Stderr, "capalloc-plugin: a capalloc backend plugin (backends: %s); it is started by a host that opens plugin:NAME, not by hand\n",
		strings.Join(backends.Names(), ", "))
	os.Exit(2)
}
