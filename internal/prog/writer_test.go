package prog

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// Writes from several goroutines each reach W whole, and Do reads W
// between writes.
func TestLockedWriterKeepsWritesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := &LockedWriter{W: &buf}
	line := strings.Repeat("x", 100) + "\n"
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, err := w.Write([]byte(line)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var got string
	w.Do(func() { got = buf.String() })
	if want := strings.Repeat(line, 800); got != want {
		t.Fatalf("got %d bytes, not 800 whole lines", len(got))
	}
}
