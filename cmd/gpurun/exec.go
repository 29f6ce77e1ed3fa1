package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/capalloc/capalloc/internal/syncbuf"
)

// outcome is what one command did.
type outcome struct {
	RC       int
	TimedOut bool
	Elapsed  time.Duration
	Output   []byte // stdout and stderr together, in order
}

// execStep runs command with bash in dir, with env added, in a process
// group of its own: at the timeout the whole group is killed (a test
// binary's children, a rank process, a plugin's backend process), so
// nothing it started outlives the step or holds the GPU for the next one.
// rc is 124 on a timeout, as timeout(1) says it.
func execStep(command, dir string, env []string, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out syncbuf.Buffer // stdout and stderr, copied from two pipes at once
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The negative pid is the group: bash and everything under it.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second // pipes held open by an orphan do not hold the runner
	start := time.Now()
	err := cmd.Run()
	o := outcome{Elapsed: time.Since(start)}
	if cmd.Process != nil { // whatever the step left behind in its group
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	o.Output = out.Bytes()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		o.RC, o.TimedOut = 124, true
	case err == nil:
	case errors.As(err, &ee):
		o.RC = ee.ExitCode()
		if o.RC < 0 { // killed by a signal
			o.RC = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	default:
		o.RC = 127
		o.Output = append(o.Output, []byte("\ngpurun: "+err.Error()+"\n")...)
	}
	return o
}
