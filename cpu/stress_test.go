package cpu_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// Many goroutines on their own streams and on one shared stream, with
// captures, launches and device-wide calls interleaved. Run with -race.
func TestConcurrentStress(t *testing.T) {
	d := newDriver(t, cpu.Options{MemoryLimit: 256 << 20})
	iters := 200
	if testing.Short() {
		iters = 50
	}
	shared := newStream(t, d)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}

	// Own stream each: eager work, then a capture replayed with new data.
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ownStreamWorker(d, w, iters); err != nil {
				fail(fmt.Errorf("worker %d: %w", w, err))
			}
		}()
	}
	// Shared stream: each goroutine owns its allocation, the stream is common.
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sharedStreamWorker(d, shared, w, iters); err != nil {
				fail(fmt.Errorf("shared worker %d: %w", w, err))
			}
		}()
	}
	// Device-wide calls; Relaxed/ThreadLocal captures above are unaffected.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range iters {
			p, err := d.Malloc(4096)
			if err != nil {
				fail(err)
				return
			}
			h, err := d.HostAlloc(4096)
			if err != nil {
				fail(err)
				return
			}
			if err := d.Free(p); err != nil {
				fail(err)
			}
			if err := d.HostFree(h); err != nil {
				fail(err)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ok(t, d.StreamSynchronize(shared))
	wantLive(t, d, 0)
}

func ownStreamWorker(d *cpu.Driver, w, iters int) error {
	s, err := d.CreateStream()
	if err != nil {
		return err
	}
	defer d.DestroyStream(s)
	in, err := d.HostAlloc(8192)
	if err != nil {
		return err
	}
	defer d.HostFree(in)
	out, err := d.HostAlloc(8192)
	if err != nil {
		return err
	}
	defer d.HostFree(out)

	for i := range iters {
		n := int64(256 + (w*131+i*17)%7936)
		v := byte(w*31 + i)
		p, err := d.MallocAsync(n, s)
		if err != nil {
			return err
		}
		q, err := d.MallocAsync(n, s)
		if err != nil {
			return err
		}
		for j := range n {
			in[j] = v
		}
		check(d.CopyHtoDAsync(p, in[:n], s), &err)
		check(d.MemsetAsync(p, v+1, n/2, s), &err)
		check(d.CopyDtoDAsync(q, p, n, s), &err)
		check(d.CopyDtoHAsync(out[:n], q, s), &err)
		check(d.FreeAsync(p, s), &err)
		check(d.FreeAsync(q, s), &err)
		check(d.StreamSynchronize(s), &err)
		if err != nil {
			return err
		}
		for j := range n {
			want := v
			if j < n/2 {
				want = v + 1
			}
			if out[j] != want {
				return fmt.Errorf("iteration %d: byte %d is %d, want %d", i, j, out[j], want)
			}
		}
		if i%20 == 0 {
			if err := captureRound(d, s, in, out, v, driver.Modes()[1+(i/20)%2]); err != nil {
				return fmt.Errorf("iteration %d: %w", i, err)
			}
		}
	}
	return nil
}

func captureRound(d *cpu.Driver, s driver.Stream, in, out []byte, v byte, mode alloc.CaptureMode) (err error) {
	check(d.BeginCapture(s, mode), &err)
	p, e := d.MallocAsync(512, s)
	check(e, &err)
	check(d.CopyHtoDAsync(p, in[:512], s), &err)
	check(d.CopyDtoHAsync(out[:512], p, s), &err)
	check(d.FreeAsync(p, s), &err)
	g, e := d.EndCapture(s)
	check(e, &err)
	if err != nil {
		return err
	}
	ge, err := d.GraphInstantiate(g, false)
	if err != nil {
		return err
	}
	for k := range 3 {
		for j := range 512 {
			in[j] = v + byte(k)
		}
		check(d.GraphLaunch(ge, s), &err)
		check(d.StreamSynchronize(s), &err)
		if err != nil {
			return err
		}
		for j := range 512 {
			if out[j] != v+byte(k) {
				return fmt.Errorf("replay %d: byte %d is %d, want %d", k, j, out[j], v+byte(k))
			}
		}
	}
	check(d.GraphExecDestroy(ge), &err)
	check(d.GraphDestroy(g), &err)
	return err
}

func sharedStreamWorker(d *cpu.Driver, s driver.Stream, w, iters int) error {
	p, err := d.MallocAsync(1024, s)
	if err != nil {
		return err
	}
	out := make([]byte, 1024)
	for i := range iters {
		v := byte(w + i)
		check(d.MemsetAsync(p, v, 1024, s), &err)
		check(d.CopyDtoH(out, p, s), &err)
		if err != nil {
			return err
		}
		for j, b := range out {
			if b != v {
				return fmt.Errorf("iteration %d: byte %d is %d, want %d", i, j, b, v)
			}
		}
	}
	return d.FreeAsync(p, s)
}

func check(err error, first *error) {
	if err != nil && *first == nil {
		*first = err
	}
}
