// Package rendezvous hands small messages between processes through
// files on a file system they share (a shared file system across
// machines): one writer publishes a file atomically, readers poll for it.
// nccl's FileRendezvous (rank 0's unique id) and symheap's FileExchange
// (every rank's IPC handle) are built on it.
//
// Whoever can write the directory can forge every message, so the
// directory must be this user's and closed to everyone else. It is opened
// once, without following a link, and checked on the open descriptor
// (OpenDir); every message file is then opened, created and linked
// relative to that descriptor, so a directory swapped in at the same path
// after the check (by whoever can write its parent) is never read. A
// reader takes only a regular file, opened without following a link or
// blocking on a FIFO, and at most max bytes of it (docs/security.md).
package rendezvous

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrUntrustedDir is a rendezvous directory another user could write: not
// this user's, or open to its group or others. Errors that wrap it are
// *DirError and wrap driver.ErrInvalidValue too.
var ErrUntrustedDir = errors.New("rendezvous directory is not private to this user")

// DirError says which directory was refused and why.
type DirError struct {
	Dir string
	Why string
}

func (e *DirError) Error() string {
	return fmt.Sprintf("%v: %s: %s (want a directory owned by uid %d with mode 0700: a fresh one per job, e.g. os.MkdirTemp)",
		ErrUntrustedDir, e.Dir, e.Why, os.Geteuid())
}

func (e *DirError) Unwrap() []error { return []error{ErrUntrustedDir, driver.ErrInvalidValue} }

// CheckDir refuses dir unless it is a directory, not a symbolic link,
// owned by this process's effective user with no permission for group or
// others: then only this user (or root) can have put a file in it. It
// checks what is at dir now; OpenDir keeps what it checked.
func CheckDir(dir string) error {
	d, err := OpenDir(dir)
	if err != nil {
		return err
	}
	return d.Close()
}

// staleError refuses a name that already exists: a file left by an
// earlier run would hand readers a stale message.
func staleError(path string) error {
	return fmt.Errorf("%w: rendezvous file %s already exists (a stale one from an earlier run?); use a fresh path per job", driver.ErrInvalidValue, path)
}

// Publish is Dir.Publish in path's directory, opened and checked for this
// call (OpenDir).
func Publish(path string, data []byte) error {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Publish(filepath.Base(path), data)
}

// Await is Dir.Await in path's directory, opened and checked once for
// this call (OpenDir): every poll reads from the directory checked.
func Await(path string, max int64, timeout time.Duration, timedOut error) ([]byte, error) {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Await(filepath.Base(path), max, timeout, timedOut)
}
