package prog

import (
	"io"
	"sync"
)

// LockedWriter serializes writes from several goroutines (a child
// process's stdout and stderr copied by one goroutine each, ranks writing
// their results) so that each Write reaches W whole.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}

// Do runs fn while no Write is in progress, to read what W holds.
func (l *LockedWriter) Do(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn()
}
