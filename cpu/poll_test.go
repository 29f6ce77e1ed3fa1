package cpu_test

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

var _ driver.StreamPoller = (*cpu.Driver)(nil)

// StreamPoll makes the progress a GPU makes by itself: memory work runs at
// once on the polling goroutine; a batch with a host function is left for
// a blocking call (driver.ErrWouldBlock), which runs it in order and
// reports its failure.
func TestStreamPoll(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	done, err := d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("a new stream is not done")
	}

	p := val[driver.DevicePtr](t)(d.MallocAsync(4096, s))
	ok(t, d.MemsetAsync(p, 5, 4096, s))
	done, err = d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("memory work is not done after one poll: the poll must run it")
	}
	out := host(t, d, 4096)
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, 5)

	// A batch with a host function is left queued for a blocking call,
	// which runs it in order; the poll runs nothing of it.
	release := make(chan struct{})
	boom := errors.New("host function failed")
	ran := false
	ok(t, d.LaunchHostFunc(s, func() error { ran = true; <-release; return boom }))
	ok(t, d.MemsetAsync(p, 6, 4096, s)) // same batch, behind the host function
	done, err = d.StreamPoll(s)
	isErr(t, err, driver.ErrWouldBlock)
	if done || ran {
		t.Fatalf("done %v, host function ran %v: the poll must leave it to a blocking call", done, ran)
	}
	close(release)
	isErr(t, d.StreamSynchronize(s), boom)
	done, err = d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("not done after the synchronize ran the batch")
	}
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, 6)

	// Refused in a capture, which it invalidates, as cudaStreamQuery on a
	// capturing stream does.
	ok(t, d.BeginCapture(s, alloc.Global))
	_, err = d.StreamPoll(s)
	isErr(t, err, driver.ErrCaptureIllegalOp)
	endInvalidated(t, d, s)
	ok(t, d.FreeAsync(p, s))
	ok(t, d.StreamSynchronize(s))
	ok(t, d.DestroyStream(s))
	_, err = d.StreamPoll(s)
	isErr(t, err, alloc.ErrInvalidValue)
}
