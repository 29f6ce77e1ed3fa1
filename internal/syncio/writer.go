// Package syncio holds writers that several goroutines share: a child
// process's stdout and stderr copied by one goroutine each, ranks writing
// their results, loggers of allocators used from abandoned goroutines.
package syncio

import (
	"bytes"
	"io"
	"sync"
)

// Writer serializes writes to W, so that each Write reaches it whole.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}

// Buffer is a bytes.Buffer that goroutines may write and read at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Bytes is a copy of what was written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
