package plugin

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

const (
	// envParent carries the host's pid to the child, which exits when its
	// parent changes (the host died and Pdeathsig did not fire).
	envParent = "CAPALLOC_PLUGIN_PARENT"
	// envDebug turns on go-plugin's logging on both sides.
	envDebug = "CAPALLOC_PLUGIN_DEBUG"
	// exitOrphaned is the child's exit status when its host went away.
	exitOrphaned = 3
)

// selfServing is set once the program called ServeIfChild without being a
// plugin child: the host may then run os.Executable() as the plugin.
var selfServing atomic.Bool

// extraPlugins lets this package's tests serve a bare baseline service
// next to the driver, for the benchmarks.
var extraPlugins goplugin.PluginSet

// ServeIfChild makes the running program a plugin binary too. Call it
// first thing in main (or a test's TestMain). When the process was started
// as a plugin child it serves the backends linked into the program and
// exits; otherwise it returns at once, and plugin:NAME may then start this
// same program as its backend process, so no separate binary is needed.
func ServeIfChild() {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		selfServing.Store(true)
		return
	}
	os.Exit(serveChild())
}

func serveChild() int {
	watchParent()
	// go-plugin writes the handshake line to os.Stdout. A vendor library
	// printing to fd 1 before it would corrupt the line, so fd 1 becomes a
	// copy of stderr and only go-plugin gets the real stdout.
	saved, err := unix.Dup(1)
	if err != nil {
		fmt.Fprintf(os.Stderr, "capalloc plugin: dup stdout: %v\n", err)
		return 1
	}
	unix.CloseOnExec(saved)
	if err := unix.Dup2(2, 1); err != nil {
		fmt.Fprintf(os.Stderr, "capalloc plugin: redirect stdout: %v\n", err)
		return 1
	}
	os.Stdout = os.NewFile(uintptr(saved), "plugin-handshake")

	srv := newServer()
	plugins := goplugin.PluginSet{pluginName: &grpcPlugin{srv: srv}}
	for k, v := range extraPlugins {
		plugins[k] = v
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugins,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))...)
		},
		Logger: logger("capalloc-plugin-child"),
	})
	srv.closeAll()
	return 0
}

// watchParent exits the child when its parent is no longer the host that
// started it: the backstop for Pdeathsig, which fires when the forking
// *thread* exits, not the process (golang/go#27505).
func watchParent() {
	want, err := strconv.Atoi(os.Getenv(envParent))
	if err != nil {
		return
	}
	check := func() {
		if os.Getppid() != want {
			os.Exit(exitOrphaned)
		}
	}
	check()
	go func() {
		for {
			time.Sleep(100 * time.Millisecond)
			check()
		}
	}()
}

// logger silences go-plugin unless CAPALLOC_PLUGIN_DEBUG is set: it logs
// every exit of a killed backend as an error, and the host reports those
// itself, as typed errors. The child's stderr (a panic, a vendor message)
// still reaches the host's stderr through ClientConfig.Stderr.
func logger(name string) hclog.Logger {
	if os.Getenv(envDebug) == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Trace, Output: os.Stderr})
}
