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

// locked runs fn while no other method of b runs.
func (b *Buffer) locked(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn()
}

func (b *Buffer) Write(p []byte) (n int, err error) {
	b.locked(func() { n, err = b.b.Write(p) })
	return n, err
}

// Bytes is a copy of what was written so far.
func (b *Buffer) Bytes() (out []byte) {
	b.locked(func() { out = bytes.Clone(b.b.Bytes()) })
	return out
}

// String is what was written so far.
func (b *Buffer) String() (s string) {
	b.locked(func() { s = b.b.String() })
	return s
}
