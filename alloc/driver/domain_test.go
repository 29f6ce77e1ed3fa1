package driver_test

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// This test binary does not link package alloc, so there is no capture
// domain: DeviceWide and AfterGlobalCaptures run their function at once.
func TestWithoutAllocatorRunsAtOnce(t *testing.T) {
	want := errors.New("fn's error")
	ran := false
	err := driver.DeviceWide("nowhere", "test", func() error { ran = true; return want })
	if !ran || err != want {
		t.Fatalf("DeviceWide: ran %v, err %v; want fn run and its error returned as is", ran, err)
	}
	ran = false
	if now := driver.AfterGlobalCaptures("nowhere", func() { ran = true }); !now || !ran {
		t.Fatalf("AfterGlobalCaptures: ranNow %v, ran %v; want both true", now, ran)
	}
}

func TestModesIsFresh(t *testing.T) {
	m := driver.Modes()
	m[0] = driver.Relaxed
	if got := driver.Modes(); got[0] != driver.Global || len(got) != 3 {
		t.Fatalf("Modes() = %v after a caller changed its copy", got)
	}
	for _, m := range driver.Modes() {
		if p, err := driver.ParseCaptureMode(m.String()); err != nil || p != m {
			t.Fatalf("ParseCaptureMode(%q) = %v, %v", m, p, err)
		}
	}
	if _, err := driver.ParseCaptureMode("bogus"); !errors.Is(err, driver.ErrInvalidValue) {
		t.Fatalf("ParseCaptureMode(bogus): %v", err)
	}
}
