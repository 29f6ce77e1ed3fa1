package syncio

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
)

// Writes from several goroutines each arrive whole, while another
// goroutine reads the buffer.
func TestWritesArriveWhole(t *testing.T) {
	line := strings.Repeat("x", 100) + "\n"
	var out bytes.Buffer
	var buf Buffer
	for name, w := range map[string]io.Writer{"Writer": &Writer{W: &out}, "Buffer": &buf} {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					if _, err := w.Write([]byte(line)); err != nil {
						t.Error(err)
					}
					_ = buf.String()
				}
			}()
		}
		wg.Wait()
		got := out.String()
		if name == "Buffer" {
			got = string(buf.Bytes())
		}
		if want := strings.Repeat(line, 800); got != want {
			t.Errorf("%s: got %d bytes, not 800 whole lines", name, len(got))
		}
	}
}
