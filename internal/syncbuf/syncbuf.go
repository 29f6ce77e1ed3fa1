// Package syncbuf holds the writers several goroutines share: a child
// process's stdout and stderr pipes copied into one buffer, a logger that
// abandoned calls still write to while a test reads it, the output of
// several ranks' processes sent to one writer.
package syncbuf

import (
	"bytes"
	"io"
	"sync"
)

// Writer serializes writes to W, so writes from several goroutines reach
// it whole and one at a time.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}

// Buffer is a bytes.Buffer that goroutines may write while another reads
// it. The zero Buffer is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Bytes is a copy of what was written so far: later writes do not change
// it.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}
