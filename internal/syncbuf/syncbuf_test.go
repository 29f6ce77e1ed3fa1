package syncbuf

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// writeFrom writes "<c>\n" times times from each of n goroutines to w,
// while read (if set) reads concurrently, and waits for them.
func writeFrom(w interface{ Write([]byte) (int, error) }, n, times int, read func()) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := []byte{byte('a' + g), '\n'}
			for range times {
				if _, err := w.Write(line); err != nil {
					panic(err)
				}
				if read != nil {
					read()
				}
			}
		}()
	}
	wg.Wait()
}

// Every write lands whole in the Buffer while others write and read it
// (run with -race), and Bytes is a copy later writes leave alone.
func TestBufferTakesConcurrentWritesWhole(t *testing.T) {
	var b Buffer
	writeFrom(&b, 8, 200, func() { _ = b.String() })
	got := b.Bytes()
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	for i, l := range lines {
		if len(l) != 1 || l[0] < 'a' || l[0] > 'h' {
			t.Fatalf("line %d is %q: writes were interleaved or lost", i, l)
		}
	}
	_, _ = b.Write([]byte("more"))
	if bytes.HasSuffix(got, []byte("more")) || b.String() != string(got)+"more" {
		t.Fatal("Bytes is not a copy, or the later write is missing")
	}
}

// overlapDetector is an io.Writer that counts writes made while another
// was still inside it.
type overlapDetector struct {
	inside, overlaps, writes atomic.Int64
}

func (d *overlapDetector) Write(p []byte) (int, error) {
	if d.inside.Add(1) > 1 {
		d.overlaps.Add(1)
	}
	for range 100 { // stay inside long enough for an unserialized caller to meet us
		d.writes.Add(0)
	}
	d.writes.Add(1)
	d.inside.Add(-1)
	return len(p), nil
}

// Writer lets one write at a time reach W.
func TestWriterSerializesWrites(t *testing.T) {
	d := &overlapDetector{}
	writeFrom(&Writer{W: d}, 8, 500, nil)
	if n := d.writes.Load(); n != 8*500 {
		t.Fatalf("%d writes reached W, want %d", n, 8*500)
	}
	if n := d.overlaps.Load(); n != 0 {
		t.Fatalf("%d writes reached W while another was inside it", n)
	}
}
