// Package rendezvous hands small messages between processes through
// files on a file system they share (a shared file system across
// machines): one writer publishes a file atomically, readers poll for it.
// nccl's FileRendezvous (rank 0's unique id) and symheap's FileExchange
// (every rank's IPC handle) are built on it.
package rendezvous

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/capalloc/capalloc/alloc"
)

// Fresh refuses a path that already exists: a file left by an earlier run
// would hand readers a stale message. The error wraps alloc.ErrInvalidValue.
func Fresh(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: rendezvous file %s already exists (a stale one from an earlier run?); use a fresh path per job", alloc.ErrInvalidValue, path)
	}
	return nil
}

// Publish writes data to path atomically: a temporary file in the same
// directory, complete and closed, then linked into place, so a reader sees
// the whole message or nothing. A path that exists is refused (Fresh),
// also when another writer wins the race (where the file system has hard
// links; elsewhere the file is renamed into place). Errors wrap
// alloc.ErrInvalidValue.
func Publish(path string, data []byte) error {
	if err := Fresh(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("%w: rendezvous: %v", alloc.ErrInvalidValue, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("%w: rendezvous: writing %s: %v", alloc.ErrInvalidValue, f.Name(), err)
	}
	// A hard link, unlike a rename, fails when path exists.
	err = os.Link(f.Name(), path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return Fresh(path)
	}
	// A file system without hard links: rename, atomic too, which
	// replaces a file that appeared since the check above.
	if rerr := os.Rename(f.Name(), path); rerr != nil {
		return fmt.Errorf("%w: rendezvous: %v; %v", alloc.ErrInvalidValue, err, rerr)
	}
	return nil
}

// Await polls for path until it exists and returns its bytes. Past
// timeout the error wraps timedOut (the caller's sentinel) and says what
// was awaited; another failure to read wraps alloc.ErrInvalidValue.
func Await(path string, timeout time.Duration, timedOut error) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		b, err := os.ReadFile(path)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: rendezvous: %v", alloc.ErrInvalidValue, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: nothing at %s after %v", timedOut, path, timeout)
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
	}
}
