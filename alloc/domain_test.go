package alloc

import (
	"errors"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// hooked is the capture domains as alloc/driver reaches them.
var hooked allochooks.CaptureDomains = captureDomains{}

func TestDeviceWideRefusedDuringGlobalCapture(t *testing.T) {
	const name = "test-devicewide"
	d := domainFor(name)
	called := false
	call := func() error { called = true; return nil }

	d.add(1, ThreadLocal)
	d.add(2, Relaxed)
	if err := hooked.DeviceWide(name, "op", call); err != nil || !called {
		t.Fatalf("ThreadLocal/Relaxed captures must not refuse: err=%v called=%v", err, called)
	}
	called = false
	d.add(3, Global)
	err := hooked.DeviceWide(name, "open thing", call)
	if !errors.Is(err, driver.ErrCaptureIllegalOp) || called {
		t.Fatalf("want ErrCaptureIllegalOp and no call, got err=%v called=%v", err, called)
	}
	d.remove(3)
	d.remove(2)
	d.remove(1)
	want := errors.New("fn's own error")
	if err := hooked.DeviceWide(name, "op", func() error { return want }); err != want {
		t.Fatalf("fn's error is returned as is: %v", err)
	}
}

func TestAfterGlobalCapturesDefersUntilTheLastEnds(t *testing.T) {
	const name = "test-afterglobal"
	d := domainFor(name)
	ran := make(chan struct{}, 4)
	fn := func() { ran <- struct{}{} }

	if !hooked.AfterGlobalCaptures(name, fn) {
		t.Fatal("no capture: runs now")
	}
	<-ran

	d.add(1, Global)
	d.add(2, Global)
	if hooked.AfterGlobalCaptures(name, fn) {
		t.Fatal("a Global capture is active: deferred")
	}
	d.remove(1)
	select {
	case <-ran:
		t.Fatal("ran while a Global capture was still active")
	case <-time.After(20 * time.Millisecond):
	}
	// A Global capture that begins while the hook is pending holds it back.
	d.gate.Lock(0)
	d.remove(2) // the count drops to zero: the hook's goroutine waits for the gate
	d.add(4, Global)
	d.gate.Unlock()
	select {
	case <-ran:
		t.Fatal("ran although a new Global capture began before it could")
	case <-time.After(20 * time.Millisecond):
	}
	d.remove(4)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the hook never ran after the last Global capture ended")
	}
}
