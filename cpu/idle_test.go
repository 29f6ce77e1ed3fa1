package cpu_test

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

var _ driver.StreamIdler = (*cpu.Driver)(nil)

// StreamIdle never runs queued work: it says "not idle" while anything is
// queued, and once the queue has run (here because it filled up) reports
// that work's failure once, as a synchronize would.
func TestStreamIdle(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	idle, err := d.StreamIdle(s)
	ok(t, err)
	if !idle {
		t.Fatal("a new stream is not idle")
	}

	ran := 0
	boom := errors.New("host function failed")
	ok(t, d.LaunchHostFunc(s, func() error { ran++; return boom }))
	idle, err = d.StreamIdle(s)
	ok(t, err)
	if idle || ran != 0 {
		t.Fatalf("idle %v with work queued, ran %d: StreamIdle must not run the queue", idle, ran)
	}

	// Fill the queue so the driver runs it on its own.
	for i := 0; ran == 0 && i < 1<<17; i++ {
		ok(t, d.LaunchHostFunc(s, func() error { return nil }))
	}
	if ran != 1 {
		t.Fatal("the queue never ran")
	}
	idle, err = d.StreamIdle(s) // the drain ran everything queued
	if !idle {
		t.Fatal("not idle after the queue ran")
	}
	isErr(t, err, boom)
	idle, err = d.StreamIdle(s)
	ok(t, err)
	if !idle {
		t.Fatal("not idle after the failure was reported")
	}

	p := val[driver.DevicePtr](t)(d.MallocAsync(256, s))
	// Refused in a capture, which it invalidates, as cudaStreamQuery on a
	// capturing stream does.
	ok(t, d.BeginCapture(s, alloc.Global))
	_, err = d.StreamIdle(s)
	isErr(t, err, driver.ErrCaptureIllegalOp)
	endInvalidated(t, d, s)
	ok(t, d.FreeAsync(p, s))
}
