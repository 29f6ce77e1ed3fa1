package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/symheap"
)

// The Collectives group with ranks as processes: the group's memfds are
// passed to child processes (this test binary, in rank mode), which attach
// them, open the backend themselves and run every collective captured and
// replayed with fresh data against the reference. This exercises the
// handle exchange for real: each process maps the heaps at its own
// addresses.

const (
	envRank        = "CAPALLOC_CONFORMANCE_RANK"
	envRanks       = "CAPALLOC_CONFORMANCE_RANKS"
	envRankBackend = "CAPALLOC_CONFORMANCE_RANK_BACKEND"
	procHeapSize   = 1 << 20
	procReplays    = 5
)

func TestCollectivesAcrossProcesses(t *testing.T) {
	names := []string{selected()}
	if names[0] == "" {
		names, _ = available()
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			d, err := backends.OpenDriver(context.Background(), name)
			require.NoError(t, err)
			runs := symheap.Runs(d)
			require.NoError(t, d.Close())
			if !runs {
				t.Logf("backend %s runs no collectives (checked in TestConformance/%s/Collectives)", name, name)
				return
			}
			const ranks = 3
			g, err := symheap.NewGroup(ranks, procHeapSize)
			require.NoError(t, err)
			defer g.Close()
			exe, err := os.Executable()
			require.NoError(t, err)
			var cmds []*exec.Cmd
			for r := range ranks {
				cmd := exec.Command(exe, "-test.run=^$")
				cmd.Env = append(os.Environ(), envRank+"="+strconv.Itoa(r), envRanks+"="+strconv.Itoa(ranks), envRankBackend+"="+name)
				cmd.ExtraFiles = g.Files()
				cmd.Stderr = os.Stderr
				require.NoError(t, cmd.Start())
				cmds = append(cmds, cmd)
			}
			done := make(chan error, ranks)
			for r, cmd := range cmds {
				go func() {
					if err := cmd.Wait(); err != nil {
						done <- fmt.Errorf("rank %d: %w", r, err)
						return
					}
					done <- nil
				}()
			}
			deadline := time.After(time.Minute)
			for range ranks {
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-deadline:
					for _, c := range cmds {
						_ = c.Process.Kill()
					}
					t.Fatal("rank processes still running after a minute")
				}
			}
		})
	}
}

// rankProcessIfChild runs this process as one rank of
// TestCollectivesAcrossProcesses when the environment says so, and exits.
func rankProcessIfChild() {
	if os.Getenv(envRank) == "" {
		return
	}
	if err := rankProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance rank process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func rankProcess() error {
	r, err1 := strconv.Atoi(os.Getenv(envRank))
	n, err2 := strconv.Atoi(os.Getenv(envRanks))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("heap-%d", i))
	}
	g, err := symheap.Attach(files, procHeapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	d, err := backends.OpenDriver(context.Background(), os.Getenv(envRankBackend))
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{Watchdog: testWatchdog})
	if err != nil {
		return err
	}
	defer a.Close()
	h, err := g.Open(r, a, symheap.Options{Timeout: 20 * time.Second, CheckAllocs: true})
	if err != nil {
		return err
	}
	defer h.Close()
	// The same collectives and checks as the goroutine ranks, one rank's
	// side of each, in the same order on every rank.
	for _, c := range collectives() {
		in, out, io, err := c.setup(n, a, h.Alloc)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		defer io.close()
		g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return c.step(h, io, in, out) })
		if err != nil {
			return fmt.Errorf("%s: capture: %w", c.name, err)
		}
		for k := 1; k <= procReplays; k++ {
			c.fill(io, r, k)
			if err := g.Launch(); err != nil {
				return err
			}
			if err := h.Synchronize(); err != nil {
				return fmt.Errorf("%s: replay %d: %w", c.name, k, err)
			}
			if err := c.verify(io, n, r, k); err != nil {
				return fmt.Errorf("%s: replay %d: %w", c.name, k, err)
			}
		}
		if err := g.Close(); err != nil {
			return err
		}
		if err := h.Barrier(); err != nil { // nobody resets while a peer reads
			return err
		}
		if err := a.Synchronize(); err != nil {
			return err
		}
		if err := h.Reset(); err != nil {
			return err
		}
	}
	return nil
}
