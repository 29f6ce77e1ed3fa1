package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"github.com/hashicorp/go-plugin/runner"
)

// process is the backend's process, started by go-plugin through this
// runner so that the host controls how it is forked and learns its exit
// status the moment it dies.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File // read ends; the child has the write ends
	pid            int

	exited chan struct{} // closed when the process has been reaped
	state  *os.ProcessState
	err    error // Wait's error

	// pidfd names this process, not its pid number (which the kernel
	// reuses once it is reaped): alive uses it. -1 without pidfds. mu
	// keeps it from being closed under alive.
	mu    sync.RWMutex
	pidfd int
}

var _ runner.Runner = (*process)(nil)

// newProcess runs the binary at run, with path as its argv[0] (they
// differ when run is a checked descriptor, /proc/self/fd/N).
func newProcess(run, path string, env []string) *process {
	cmd := exec.Command(run)
	cmd.Args[0] = path
	cmd.Env = append(env, envParent+"="+strconv.Itoa(os.Getpid()))
	// A killed host must leave no orphan: the kernel kills the child when
	// the forking thread dies (see forker), and the child also watches its
	// parent pid.
	cmd.SysProcAttr = childSysProcAttr()
	return &process{cmd: cmd, exited: make(chan struct{}), pidfd: -1}
}

// forker runs every fork on one goroutine locked to its OS thread for the
// life of the process: Pdeathsig fires when the forking thread exits
// (golang/go#27505), and a locked thread that never exits never fires it.
var forker struct {
	once sync.Once
	reqs chan func()
}

func onForkThread(f func()) {
	forker.once.Do(func() {
		forker.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range forker.reqs {
				f()
			}
		}()
	})
	done := make(chan struct{})
	forker.reqs <- func() { f(); close(done) }
	<-done
}

func (p *process) Start(context.Context) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	// Files rather than StdoutPipe: Wait must not close what go-plugin is
	// still reading, since the host reaps the child as soon as it dies.
	p.cmd.Stdout, p.cmd.Stderr = outW, errW
	onForkThread(func() { err = p.cmd.Start() })
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	p.stdout, p.stderr, p.pid = outR, errR, p.cmd.Process.Pid
	p.pidfd = pidfdOpen(p.pid) // before Wait: nothing reaps the child until then
	go func() {
		p.err = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		p.mu.Lock()
		if p.pidfd >= 0 {
			_ = syscall.Close(p.pidfd)
			p.pidfd = -1
		}
		p.mu.Unlock()
		close(p.exited)
	}()
	return nil
}

func (p *process) Wait(context.Context) error {
	<-p.exited
	return p.err
}

func (p *process) Kill(context.Context) error {
	if p.cmd.Process == nil {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// alive reports whether the process has not been reaped, so that its pid
// still names it: a file opened through /proc/<pid> before alive said so
// came from this process, never from a stranger that reused the number.
func (p *process) alive() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.pidfd >= 0 {
		return pidfdAlive(p.pidfd)
	}
	select {
	case <-p.exited:
		return false
	default: // the reaper may have reaped it and not said so yet: the pidfd covers that
		return true
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *process) kill() {
	_ = p.Kill(context.Background())
	<-p.exited
}

// status describes how the process ended ("exit status 7", "signal:
// killed"); only valid once exited is closed.
func (p *process) status() string {
	if p.state == nil {
		return fmt.Sprintf("unknown (%v)", p.err)
	}
	return p.state.String()
}

func (p *process) Stdout() io.ReadCloser                            { return p.stdout }
func (p *process) Stderr() io.ReadCloser                            { return p.stderr }
func (p *process) Name() string                                     { return p.cmd.Args[0] } // the path, not /proc/self/fd/N
func (p *process) ID() string                                       { return strconv.Itoa(p.pid) }
func (p *process) Diagnose(context.Context) string                  { return "" }
func (p *process) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (p *process) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }
