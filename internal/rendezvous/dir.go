package rendezvous

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Dir is a rendezvous directory opened once and checked on its open
// descriptor: the message files are opened, created, linked and removed
// relative to that descriptor (dir_linux.go), so what is read is what was
// checked even if another directory is renamed into its path later.
// Close it when done.
type Dir struct {
	path string
	f    *os.File // the directory itself
}

// OpenDir opens path as a rendezvous directory: a directory, not a
// symbolic link, owned by this process's effective user and giving no
// permission to group or others, checked on the open descriptor. Anything
// else is a *DirError (ErrUntrustedDir, driver.ErrInvalidValue).
func OpenDir(path string) (*Dir, error) {
	f, err := openDir(path)
	if err != nil {
		why := err.Error()
		switch fi, lerr := os.Lstat(path); {
		case lerr == nil && fi.Mode()&fs.ModeSymlink != 0:
			why = "a symbolic link (name the directory itself)"
		case errors.Is(err, syscall.ENOTDIR):
			why = "not a directory"
		}
		return nil, &DirError{Dir: path, Why: why}
	}
	if err := checkOpenDir(path, f); err != nil {
		f.Close()
		return nil, err
	}
	return &Dir{path: path, f: f}, nil
}

// checkOpenDir checks the directory f, opened at path, on its descriptor.
func checkOpenDir(path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return &DirError{Dir: path, Why: err.Error()}
	}
	if !fi.IsDir() {
		return &DirError{Dir: path, Why: "not a directory"}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return &DirError{Dir: path, Why: fmt.Sprintf("mode %#o lets group or others in", perm)}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return &DirError{Dir: path, Why: fmt.Sprintf("owned by uid %d", st.Uid)}
	}
	return nil
}

// Path is the path the directory was opened at.
func (d *Dir) Path() string { return d.path }

// Close closes the directory's descriptor.
func (d *Dir) Close() error { return d.f.Close() }

// join names a file of the directory in errors.
func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

// checkName refuses a name that is not one entry of the directory: a
// path, "." or "..", which would lead out of it.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, filepath.Separator) {
		return fmt.Errorf("%w: rendezvous: %q is not a file name", driver.ErrInvalidValue, name)
	}
	return nil
}

// Exists says whether the directory has an entry name (not following a
// link).
func (d *Dir) Exists(name string) bool { return checkName(name) == nil && d.exists(name) }

// Fresh refuses a name that already exists in the directory: a file left
// by an earlier run would hand readers a stale message. The error wraps
// driver.ErrInvalidValue.
func (d *Dir) Fresh(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if d.exists(name) {
		return staleError(d.join(name))
	}
	return nil
}

// Publish writes data as the directory's file name atomically: a
// temporary file in the directory, complete and closed, then linked into
// place, so a reader sees the whole message or nothing. A name that
// exists is refused (Fresh), also when another writer wins the race
// (where the file system has hard links; elsewhere the file is renamed
// into place). Errors wrap driver.ErrInvalidValue.
func (d *Dir) Publish(name string, data []byte) error {
	if err := d.Fresh(name); err != nil {
		return err
	}
	tmp, f, err := d.createTemp(name + ".tmp")
	if err != nil {
		return fmt.Errorf("%w: rendezvous: %v", driver.ErrInvalidValue, err)
	}
	defer d.remove(tmp)
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("%w: rendezvous: writing %s: %v", driver.ErrInvalidValue, d.join(tmp), err)
	}
	// A hard link, unlike a rename, fails when name exists.
	err = d.link(tmp, name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return staleError(d.join(name))
	}
	// A file system without hard links: rename, atomic too, which
	// replaces a file that appeared since the check above.
	if rerr := d.rename(tmp, name); rerr != nil {
		return fmt.Errorf("%w: rendezvous: %v; %v", driver.ErrInvalidValue, err, rerr)
	}
	return nil
}

// createTemp creates a new file of the directory, prefix and a random
// suffix, for writing only by this user.
func (d *Dir) createTemp(prefix string) (string, *os.File, error) {
	for range 100 {
		name := fmt.Sprintf("%s%08x", prefix, rand.Uint32())
		f, err := d.open(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return name, f, err
	}
	return "", nil, fmt.Errorf("no free temporary name %s* in %s", prefix, d.path)
}

// Await polls for the directory's file name until it exists and returns
// its bytes, at most max of them. Past timeout the error wraps timedOut
// (the caller's sentinel) and says what was awaited; a name that is not a
// regular file (a link, a FIFO, a device), one of more than max bytes, or
// another failure to read wraps driver.ErrInvalidValue.
func (d *Dir) Await(name string, max int64, timeout time.Duration, timedOut error) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		b, err := d.read(name, max)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: rendezvous: %v", driver.ErrInvalidValue, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: nothing at %s after %v", timedOut, d.join(name), timeout)
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
	}
}

// read returns name's bytes if it is a regular file of at most max bytes:
// opened without following a link (O_NOFOLLOW) or waiting for a FIFO's
// writer (O_NONBLOCK), checked on the open file, read with a cap (a file
// may grow after the check).
func (d *Dir) read(name string, max int64) ([]byte, error) {
	path := d.join(name)
	f, err := d.open(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
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
