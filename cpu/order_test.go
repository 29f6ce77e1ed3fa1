package cpu_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// A blocking copy runs at its place in stream order: while one goroutine
// enqueues memsets (and makes the stream run them) another's blocking
// download must never see a half-written buffer, and an upload must never
// be overwritten mid-copy (issue 8, item 5: 8 of 349 reads were torn, and
// the race detector flagged fill against the copy).
func TestBlockingCopiesAreOrderedAgainstConcurrentWork(t *testing.T) {
	d := newDriver(t, cpu.Options{})
	s := newStream(t, d)
	const n = 1 << 20
	p := val[alloc.DevicePtr](t)(d.Malloc(n))
	ok(t, d.MemsetAsync(p, 1, n, s))
	ok(t, d.StreamSynchronize(s))

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // the writer: memsets, run at once by a query
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := d.MemsetAsync(p, byte(1+i%2), n, s); err != nil {
				t.Error(err)
				return
			}
			if _, err := d.StreamQuery(s); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dst := make([]byte, n)
	up := bytes.Repeat([]byte{7}, n)
	torn := 0
	for i := range 300 {
		if i%3 == 0 {
			ok(t, d.CopyHtoD(p, up, s))
			continue
		}
		ok(t, d.CopyDtoH(dst, p, s))
		if c := bytes.Count(dst, dst[:1]); c != n {
			torn++
		}
	}
	close(stop)
	wg.Wait()
	if torn > 0 {
		t.Fatalf("%d of 200 downloads were torn: a blocking copy ran concurrently with later work", torn)
	}
}
