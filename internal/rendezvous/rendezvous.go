// Package rendezvous hands small messages between processes through
// files on a file system they share (a shared file system across
// machines): one writer publishes a file atomically, readers poll for it.
// nccl's FileRendezvous (rank 0's unique id) and symheap's FileExchange
// (every rank's IPC handle) are built on it.
//
// Whoever can write the directory can forge every message, so the
// directory must be this user's and closed to everyone else (CheckDir,
// run by Publish and Await), and a reader takes only a regular file,
// opened without following a link or blocking on a FIFO, and at most max
// bytes of it (docs/security.md).
package rendezvous

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// CheckDir refuses dir unless it is a directory owned by this process's
// effective user with no permission for group or others: then only this
// user (or root) can have put a file in it.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return &DirError{Dir: dir, Why: err.Error()}
	}
	if !fi.IsDir() {
		return &DirError{Dir: dir, Why: "not a directory"}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return &DirError{Dir: dir, Why: fmt.Sprintf("mode %#o lets group or others in", perm)}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return &DirError{Dir: dir, Why: fmt.Sprintf("owned by uid %d", st.Uid)}
	}
	return nil
}

// Fresh refuses a path that already exists: a file left by an earlier run
// would hand readers a stale message. The error wraps driver.ErrInvalidValue.
func Fresh(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: rendezvous file %s already exists (a stale one from an earlier run?); use a fresh path per job", driver.ErrInvalidValue, path)
	}
	return nil
}

// Publish writes data to path atomically: a temporary file in the same
// directory, complete and closed, then linked into place, so a reader sees
// the whole message or nothing. A path that exists is refused (Fresh),
// also when another writer wins the race (where the file system has hard
// links; elsewhere the file is renamed into place). A directory another
// user could write is refused (CheckDir). Errors wrap
// driver.ErrInvalidValue.
func Publish(path string, data []byte) error {
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	if err := Fresh(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("%w: rendezvous: %v", driver.ErrInvalidValue, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("%w: rendezvous: writing %s: %v", driver.ErrInvalidValue, f.Name(), err)
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
		return fmt.Errorf("%w: rendezvous: %v; %v", driver.ErrInvalidValue, err, rerr)
	}
	return nil
}

// Await polls for path until it exists and returns its bytes, at most
// max of them. Past timeout the error wraps timedOut (the caller's
// sentinel) and says what was awaited; a directory another user could
// write (CheckDir), a path that is not a regular file (a link, a FIFO, a
// device), one of more than max bytes, or another failure to read wraps
// driver.ErrInvalidValue.
func Await(path string, max int64, timeout time.Duration, timedOut error) ([]byte, error) {
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		b, err := read(path, max)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: rendezvous: %v", driver.ErrInvalidValue, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: nothing at %s after %v", timedOut, path, timeout)
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
	}
}

// read returns path's bytes if it is a regular file of at most max bytes:
// opened without following a link (O_NOFOLLOW) or waiting for a FIFO's
// writer (O_NONBLOCK), checked on the open file, read with a cap (a file
// may grow after the check).
func read(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link", path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s holds %d B, more than the %d B a message may have", path, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s grew past the %d B a message may have", path, max)
	}
	return b, nil
}
