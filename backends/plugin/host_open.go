package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

func init() {
	driver.RegisterScheme("plugin", func(ctx context.Context, target string, opts driver.Options) (driver.Driver, error) {
		d, err := Open(ctx, target, opts)
		if err != nil {
			return nil, err // not a nil *Driver in a non-nil interface
		}
		return d, nil
	})
}

const (
	// EnvBinary names the plugin binary for plugin:NAME explicitly.
	EnvBinary = "CAPALLOC_PLUGIN"
	// BinaryName is the plugin binary looked for next to the program and
	// on $PATH (built from cmd/capalloc-plugin).
	BinaryName = "capalloc-plugin"

	// DefaultCallTimeout bounds each call when plugin.call_timeout is not
	// set. It matches alloc.DefaultWatchdog: a legitimately long
	// synchronize is not killed before the allocator would give up on it.
	DefaultCallTimeout = alloc.DefaultWatchdog
	// DefaultStartTimeout bounds the start and handshake.
	DefaultStartTimeout = 30 * time.Second
)

// Host option keys; every other option is forwarded to the backend.
const (
	optPrefix       = "plugin."
	optSHA256       = optPrefix + "sha256"
	optCallTimeout  = optPrefix + "call_timeout"
	optStartTimeout = optPrefix + "start_timeout"
	optBackend      = optPrefix + "backend"
)

// domains numbers backend processes, so capture domains never collide.
var domains atomic.Int64

// Open starts the backend named by target (a registered name, or a path to
// a plugin binary) in its own process and returns the host's driver for
// it. It is the "plugin" scheme's factory.
func Open(ctx context.Context, target string, opts backends.Options) (*Driver, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: plugin mode needs Linux (shared memory is memfd, and the backend process dies with its host through Pdeathsig); this is %s", driver.ErrBackendUnavailable, runtime.GOOS)
	}
	host, fwd := backends.Options{}, backends.Options{}
	for k, v := range opts {
		if strings.HasPrefix(k, optPrefix) {
			host[k] = v
		} else {
			fwd[k] = v
		}
	}
	if err := host.Check(optSHA256, optCallTimeout, optStartTimeout, optBackend); err != nil {
		return nil, err
	}
	callTimeout, err := host.Duration(optCallTimeout, DefaultCallTimeout)
	if err != nil {
		return nil, err
	}
	startTimeout, err := host.Duration(optStartTimeout, DefaultStartTimeout)
	if err != nil {
		return nil, err
	}
	if callTimeout == 0 || startTimeout == 0 {
		return nil, fmt.Errorf("%w: plugin timeouts must be positive", backends.ErrInvalidConfig)
	}
	var sum []byte
	if h, ok := host[optSHA256]; ok {
		sum, err = hex.DecodeString(h)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%w: option %s=%q: want 64 hex digits", backends.ErrInvalidConfig, optSHA256, h)
		}
	}

	var path, backend string
	if strings.ContainsRune(target, os.PathSeparator) {
		path, backend = target, host.Get(optBackend, "")
	} else {
		if _, ok := host[optBackend]; ok {
			return nil, fmt.Errorf("%w: %s only goes with a binary path (plugin:/path/to/binary)", backends.ErrInvalidConfig, optBackend)
		}
		if strings.Contains(target, ":") {
			return nil, fmt.Errorf("%w: plugin:%s: a plugin runs a registered backend, not another scheme", backends.ErrInvalidConfig, target)
		}
		backend = target
		exe, _ := os.Executable()
		if path, err = findBinary(os.Getenv, selfServing.Load(), exe, exec.LookPath); err != nil {
			return nil, err
		}
	}
	run := path
	if sum != nil {
		f, err := openChecked(path, sum)
		if err != nil {
			return nil, err
		}
		defer f.Close() // once the child has exec'd it
		run = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
	return start(ctx, run, path, backend, fwd, callTimeout, startTimeout)
}

// afterChecksum, when set (by tests), runs between the checksum and the
// exec: where a swapped file would be run if the exec went by path.
var afterChecksum func()

// openChecked opens the plugin binary at path and checks its SHA-256
// through the open file, which the caller then executes (as
// /proc/self/fd/N, as fexecve does): a file swapped at path after the
// check is never what runs.
func openChecked(path string, sum []byte) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin binary %s: checksum: %v", driver.ErrBackendUnavailable, path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: plugin binary %s: checksum: %v", driver.ErrBackendUnavailable, path, err)
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		f.Close()
		return nil, fmt.Errorf("%w: plugin binary %s does not match %s", driver.ErrBackendUnavailable, path, optSHA256)
	}
	if afterChecksum != nil {
		afterChecksum()
	}
	return f, nil
}

// findBinary picks the plugin binary for plugin:NAME: $CAPALLOC_PLUGIN, the
// program itself when it serves plugins (ServeIfChild), capalloc-plugin next
// to it, capalloc-plugin on $PATH.
func findBinary(getenv func(string) string, self bool, exe string, lookPath func(string) (string, error)) (string, error) {
	if p := getenv(EnvBinary); p != "" {
		return p, nil
	}
	if self && exe != "" {
		return exe, nil
	}
	var searched []string
	if exe != "" {
		p := filepath.Join(filepath.Dir(exe), BinaryName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
		searched = append(searched, p)
	}
	if p, err := lookPath(BinaryName); err == nil {
		return p, nil
	}
	searched = append(searched, "$PATH")
	return "", fmt.Errorf("%w: no plugin binary: $%s is unset, the program does not call plugin.ServeIfChild, and %s is not in %s",
		driver.ErrBackendUnavailable, EnvBinary, BinaryName, strings.Join(searched, " or "))
}

// start runs the binary at run (path, or the checked file's descriptor)
// as the backend process; path is what errors name.
func start(ctx context.Context, run, path, backend string, fwd backends.Options, callTimeout, startTimeout time.Duration) (*Driver, error) {
	var proc *process
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          hostPlugins(),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
			proc = newProcess(run, path, spec.Env)
			return proc, nil
		},
		StartTimeout: startTimeout,
		Logger:       logger("capalloc-plugin"),
		Stderr:       os.Stderr,
		SyncStderr:   os.Stderr,
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)),
		},
	})
	fail := func(err error) (*Driver, error) {
		client.Kill()
		return nil, err
	}
	rpc, err := client.Client()
	if err != nil {
		return fail(fmt.Errorf("%w: starting plugin %s: %v", driver.ErrBackendUnavailable, path, err))
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		return fail(fmt.Errorf("%w: plugin %s: %v", driver.ErrBackendUnavailable, path, err))
	}
	dctx, cancel := context.WithCancel(context.Background())
	d := &Driver{
		name:        "plugin:" + backend,
		client:      client,
		conn:        raw.(*grpc.ClientConn),
		proc:        proc,
		callTimeout: callTimeout,
		ctx:         dctx,
		cancel:      cancel,
	}
	d.pipe.space.L = &d.mu
	d.track.init()
	go d.watch()
	stop := context.AfterFunc(ctx, func() { d.die(fmt.Errorf("%w: open cancelled: %w", driver.ErrBackendUnavailable, ctx.Err())) })
	r, err := d.call(opOpen, openReq(backend, fwd))
	stop()
	if err == nil && r.err != nil {
		err = r.err
	}
	if err != nil {
		d.closed.Store(true)
		cancel()
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return fail(err)
	}
	name, domain := r.str(), r.str()
	d.info = driver.DeviceInfo{Name: r.str(), TotalMemory: r.i64(), Alignment: r.i64(), UnifiedMemory: r.bool()}
	d.caps = r.u64()
	if r.err == nil && len(r.b) > 0 { // the safety profile; absent from a child that predates it
		d.info.Integrated, d.info.PageableMemoryAccess = r.bool(), r.bool()
		d.info.ComputeCapability = r.str()
		d.info.CaptureSafety = driver.CaptureSafety(r.i64())
		d.info.Profile = r.str()
	}
	// The child's device reads the child's pageable memory, never the
	// engine's: to the engine's allocator it has no pageable access (and
	// so none through the host's page tables, which the wire does not
	// carry), so MapHost asks for a registration, which plugin mode
	// refuses, instead of handing the engine's own address to a device
	// that cannot read it.
	d.info.PageableMemoryAccess, d.info.HostPageTables = false, false
	if r.err == nil {
		r.err = checkInfo(&d.info)
	}
	if r.err != nil {
		_ = d.Close()
		return nil, r.err
	}
	d.name = "plugin:" + name
	d.domain = fmt.Sprintf("plugin#%d/%s", domains.Add(1), domain)
	return d, nil
}

func hostPlugins() goplugin.PluginSet {
	ps := goplugin.PluginSet{pluginName: &grpcPlugin{}}
	for k, v := range extraPlugins {
		ps[k] = v
	}
	return ps
}

func openReq(backend string, opts backends.Options) *enc {
	e := newReq(opOpen).str(backend).u64(uint64(len(opts)))
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.str(k).str(opts[k])
	}
	return e
}

// maxDeviceName bounds the device name kept from the backend.
const maxDeviceName = 256

// checkInfo validates what the backend says of its device: the backend is
// not trusted, and the allocator shifts by the alignment (a forged one
// would spin alloc.New forever) and metrics label by the name.
func checkInfo(info *driver.DeviceInfo) error {
	if err := driver.CheckAlignment(info.Alignment); err != nil {
		return fmt.Errorf("%w: plugin: backend's device info: %w", errMalformed, err)
	}
	if info.TotalMemory < 0 {
		return fmt.Errorf("%w: plugin: backend's device has %d B", errMalformed, info.TotalMemory)
	}
	if info.CaptureSafety < driver.SafetyUnset || info.CaptureSafety > driver.SafetyStrict {
		return fmt.Errorf("%w: plugin: backend's device has capture safety %d", errMalformed, int(info.CaptureSafety))
	}
	if len(info.Name) > maxDeviceName {
		info.Name = info.Name[:maxDeviceName]
	}
	info.Name = strings.ToValidUTF8(info.Name, "\uFFFD")
	return nil
}
