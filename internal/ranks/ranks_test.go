package ranks

import (
	"errors"
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
