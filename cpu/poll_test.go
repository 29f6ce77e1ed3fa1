package cpu_test

import (
	"errors"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

var _ alloc.StreamPoller = (*cpu.Driver)(nil)

// StreamPoll makes the progress a GPU makes by itself: memory work runs at
// once on the polling goroutine; a batch with a host function runs on a
// goroutine of the driver's, never the poller's, and the poll says "not
// done" until it has. A failure is reported once, as by a synchronize.
func TestStreamPoll(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	s := newStream(t, d)
	done, err := d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("a new stream is not done")
	}

	p := val[alloc.DevicePtr](t)(d.MallocAsync(4096, s))
	ok(t, d.MemsetAsync(p, 5, 4096, s))
	done, err = d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("memory work is not done after one poll: the poll must run it")
	}
	out := host(t, d, 4096)
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, 5)

	release := make(chan struct{})
	started := make(chan struct{})
	boom := errors.New("host function failed")
	ok(t, d.LaunchHostFunc(s, func() error { close(started); <-release; return boom }))
	ok(t, d.MemsetAsync(p, 6, 4096, s)) // same batch, behind the host function
	done, err = d.StreamPoll(s)         // returns although the function blocks
	ok(t, err)
	if done {
		t.Fatal("done while a host function runs")
	}
	<-started
	ok(t, d.MemsetAsync(p, 7, 16, s)) // queued while the batch runs
	for range 3 {
		done, err = d.StreamPoll(s)
		ok(t, err)
		if done {
			t.Fatal("done while a host function runs")
		}
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for !done {
		if time.Now().After(deadline) {
			t.Fatal("never done after the host function returned")
		}
		time.Sleep(time.Millisecond)
		done, err = d.StreamPoll(s)
	}
	isErr(t, err, boom)
	done, err = d.StreamPoll(s)
	ok(t, err)
	if !done {
		t.Fatal("not done after the failure was reported")
	}
	ok(t, d.CopyDtoH(out, p, s))
	if out[0] != 7 || out[16] != 6 {
		t.Fatalf("bytes %d, %d: the work ran out of order", out[0], out[16])
	}

	ok(t, d.BeginCapture(s, alloc.Global))
	_, err = d.StreamPoll(s)
	isErr(t, err, alloc.ErrCaptureIllegalOp)
	_, err = d.EndCapture(s)
	isErr(t, err, alloc.ErrCaptureInvalidated) // as cudaStreamQuery on a capturing stream does
	ok(t, d.FreeAsync(p, s))
	ok(t, d.StreamSynchronize(s))
	ok(t, d.DestroyStream(s))
	_, err = d.StreamPoll(s)
	isErr(t, err, alloc.ErrInvalidValue)
}
