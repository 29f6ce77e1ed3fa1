package cpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/cpu"
)

// The config options: profile=gb10 is strict, capture_safety overrides it,
// and a bad value of either is a config error.
func TestProfileOptions(t *testing.T) {
	for _, c := range []struct {
		config  string
		safety  driver.CaptureSafety
		profile string
	}{
		{"cpu", driver.SafetyDocumented, "emulated"},
		{"cpu:profile=gb10", driver.SafetyStrict, "gb10"},
		{"cpu:profile=gb10,capture_safety=documented", driver.SafetyDocumented, "gb10"},
		{"cpu:capture_safety=strict", driver.SafetyStrict, "emulated"},
	} {
		d, err := backends.OpenDriver(context.Background(), c.config)
		if err != nil {
			t.Fatalf("%s: %v", c.config, err)
		}
		info := d.Info()
		if info.CaptureSafety != c.safety || info.Profile != c.profile {
			t.Errorf("%s: capture safety %v, profile %q; want %v, %q", c.config, info.CaptureSafety, info.Profile, c.safety, c.profile)
		}
		_ = d.Close()
	}
	for _, bad := range []string{"cpu:profile=h100", "cpu:capture_safety=lax"} {
		if _, err := backends.OpenDriver(context.Background(), bad); !errors.Is(err, backends.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// The GB10 emulation fails, without touching the capture, a synchronous
// allocation or free and a host allocation or free made while a capture
// of any mode is active on the device: the real driver hangs in them.
func TestGB10ProfileFailsWhatGB10HangsIn(t *testing.T) {
	for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
		d := newDriver(t, cpu.Options{Profile: cpu.ProfileGB10})
		p, err := d.Malloc(256)
		ok(t, err)
		h, err := d.HostAlloc(256)
		ok(t, err)
		s, err := d.CreateStream()
		ok(t, err)
		ok(t, d.BeginCapture(s, mode))
		hang := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, driver.ErrCaptureIllegalOp) || !strings.Contains(err.Error(), "hangs a GB10 driver") {
				t.Fatalf("%s %s during a capture: %v", mode, what, err)
			}
		}
		_, err = d.Malloc(256)
		hang("Malloc", err)
		hang("Free", d.Free(p))
		_, err = d.HostAlloc(256)
		hang("HostAlloc", err)
		hang("HostFree", d.HostFree(h))
		st, err := d.StreamCaptureStatus(s)
		ok(t, err)
		if st != driver.CaptureActive {
			t.Fatalf("%s: the capture was touched: %v", mode, st)
		}
		g, err := d.EndCapture(s)
		ok(t, err)
		ok(t, d.GraphDestroy(g))
		ok(t, d.Free(p))
		ok(t, d.HostFree(h))
	}
}
