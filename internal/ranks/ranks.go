// Package ranks runs one function per rank at once, the shape every
// collective needs: a rank's collective waits for its peers, so ranks in
// one process are goroutines of their own.
package ranks

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// Each runs fn(r) for r in [0, n), each in its own goroutine, waits for
// all of them and returns their errors, indexed by rank.
func Each(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errs
}

// Processes starts every command, one rank each, and waits for all of
// them; the errors are indexed by rank. A command that cannot start
// fails its rank and ends the ones already started (they would wait
// forever for the missing peer), so nothing is left running.
func Processes(cmds []*exec.Cmd) []error {
	errs := make([]error, len(cmds))
	started := 0
	for r, cmd := range cmds {
		if errs[r] = cmd.Start(); errs[r] != nil {
			for _, c := range cmds[:started] {
				_ = c.Process.Kill()
			}
			break
		}
		started++
	}
	for r, cmd := range cmds[:started] {
		if err := cmd.Wait(); err != nil {
			errs[r] = fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return errs
}

// InheritedFiles is the rank process's side of exec.Cmd.ExtraFiles: the n
// files its parent gave it as fds 3, 4, …, in rank order (the ranks'
// heaps), named heap-0, heap-1, ….
func InheritedFiles(n int) []*os.File {
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("heap-%d", i))
	}
	return files
}
