package ranks

import (
	"errors"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Every rank runs at once (each waits for all the others to start) and
// its error lands at its index.
func TestEachRunsRanksTogether(t *testing.T) {
	const n = 4
	var started atomic.Int32
	errs := Each(n, func(r int) error {
		started.Add(1)
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < n {
			if time.Now().After(deadline) {
				return errors.New("peers never started")
			}
			time.Sleep(time.Millisecond)
		}
		if r == 2 {
			return errors.New("rank 2")
		}
		return nil
	})
	if len(errs) != n {
		t.Fatalf("%d errors for %d ranks", len(errs), n)
	}
	for r, err := range errs {
		if (err != nil) != (r == 2) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// A rank that cannot start ends the ranks already started, and every
// rank's error says which: no process is left waiting for its peer.
func TestProcessesEndStartedRanksWhenOneCannotStart(t *testing.T) {
	sleeper := exec.Command("sleep", "600")
	missing := exec.Command(filepath.Join(t.TempDir(), "no-such-program"))
	errs := Processes([]*exec.Cmd{sleeper, missing})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 0") {
		t.Fatalf("the started rank was not ended, or its error does not name it: %v", errs[0])
	}
	if !errors.Is(errs[1], fs.ErrNotExist) {
		t.Fatalf("the rank that could not start: %v", errs[1])
	}
	if sleeper.ProcessState == nil || sleeper.ProcessState.Success() {
		t.Fatalf("the started rank was not waited for and ended: %v", sleeper.ProcessState)
	}
}

// Ranks that all run are each waited for; a failing one is named.
func TestProcessesWaitForEveryRank(t *testing.T) {
	errs := Processes([]*exec.Cmd{exec.Command("true"), exec.Command("false")})
	if errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 1") {
		t.Fatalf("errors %v", errs)
	}
}
