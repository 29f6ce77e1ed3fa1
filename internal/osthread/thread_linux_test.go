//go:build linux

package osthread

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestJobsRunOnOneThreadUntilStopped(t *testing.T) {
	var tid int
	th, err := Start(func() error { tid = unix.Gettid(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := th.Do(func() error {
			if got := unix.Gettid(); got != tid {
				return errors.New("a job ran on another thread")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	th.Stop()
	th.Stop() // harmless twice
	if err := th.Do(func() error { return nil }); !errors.Is(err, ErrStopped) {
		t.Fatalf("after Stop: %v", err)
	}
}

func TestInitErrorStopsTheThread(t *testing.T) {
	boom := errors.New("boom")
	if _, err := Start(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}
