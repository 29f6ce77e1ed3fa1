package alloc

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// Options.HistoryFile: the history written at each out-of-memory error.
// The error's path copies the ring under its lock (a snapshot of that
// moment) and hands it to a writer goroutine that symbolizes, encodes and
// writes it: nothing is opened, written or logged while the allocator's
// lock is held. At most one snapshot waits: a newer one replaces it
// (latest wins), in the same memory, and the memory of the last one
// written is kept for the next. The goroutine runs only while there is
// something to write; FlushHistoryFiles and Close wait for it.
//
// The file is a shared-directory file handled as untrusted: the
// directory is opened once per write and checked (checkHistoryDir), and
// everything after is relative to it (os.Root: openat, renameat). The
// target is replaced only when it is a regular file or absent, by a
// temporary file created beside it (O_CREAT|O_EXCL, never through a
// symlink) and renamed over it.

// historyFile is an allocator's writer of Options.HistoryFile.
type historyFile struct {
	a    *Allocator
	path string

	mu      sync.Mutex
	idle    sync.Cond      // on mu: broadcast when the goroutine stops
	pending *historyWindow // the snapshot to write next; nil: none
	spare   []event        // the memory of the last snapshot written
	running bool           // the goroutine is on: pending, or a write in progress
	written uint64
	failed  uint64
	err     error // the latest write's
	lastErr error // the latest failure's
}

func newHistoryFile(a *Allocator, path string) *historyFile {
	f := &historyFile{a: a, path: path}
	f.idle.L = &f.mu
	return f
}

// submit hands f the history h keeps now, and starts the goroutine when
// it is not on. It copies the ring (under h's lock) and touches no file.
func (f *historyFile) submit(h *history) {
	f.mu.Lock()
	buf := f.spare
	if f.pending != nil { // superseded before it was written: latest wins
		buf, f.pending = f.pending.events, nil
	} else {
		f.spare = nil
	}
	f.mu.Unlock()
	w := h.copyOut(buf, -1)
	f.mu.Lock()
	f.pending = &w
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		go f.run()
	}
}

// run writes the pending snapshots until there is none.
func (f *historyFile) run() {
	for {
		f.mu.Lock()
		w := f.pending
		f.pending = nil
		if w == nil {
			f.running = false
			f.idle.Broadcast()
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		err := writeHistoryFile(f.path, func(out io.Writer) error { return encodeHistory(out, historyData(f.a, *w)) })
		f.mu.Lock()
		f.spare, f.err = w.events, err
		if err != nil {
			f.failed++
			f.lastErr = err
		} else {
			f.written++
		}
		f.mu.Unlock()
		if err != nil {
			f.a.opts.logger().Warn("capalloc: writing the allocation history at out-of-memory", "allocator", f.a.name, "file", f.path, "err", err)
		}
	}
}

// flush waits until f's goroutine stops and returns the latest write's
// error.
func (f *historyFile) flush() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.running {
		f.idle.Wait()
	}
	return f.err
}

// flushFile is flush of h's file, when h and its file are on.
func (h *history) flushFile() error {
	if h == nil {
		return nil
	}
	return h.file.flush()
}

// status is how f's writes went, for the history (memmap.History.File).
func (f *historyFile) status() *memmap.HistoryFile {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &memmap.HistoryFile{Path: f.path, Written: f.written, Failed: f.failed}
	if f.lastErr != nil {
		s.Error = f.lastErr.Error()
	}
	return s
}

// refuseHistoryFile is the error of a history file refused for why.
func refuseHistoryFile(path, why string) error {
	return fmt.Errorf("%w: %s: %s", ErrHistoryFileRefused, path, why)
}

// checkHistoryFile is New's check of Options.HistoryFile: its directory
// and its target as a write would find them (nothing is written). An
// error wraps ErrInvalidValue, and ErrHistoryFileRefused for a refusal.
func checkHistoryFile(path string) error {
	dir, name, err := openHistoryDir(path)
	if err == nil {
		err = checkHistoryTarget(dir, path, name)
		dir.Close()
	}
	if err != nil && !errors.Is(err, ErrInvalidValue) {
		err = fmt.Errorf("%w: history file: %w", ErrInvalidValue, err)
	}
	return err
}

// writeHistoryFile replaces the file at path with what write writes, whole
// or not at all: a temporary file in the same directory, renamed over it.
func writeHistoryFile(path string, write func(io.Writer) error) error {
	dir, name, err := openHistoryDir(path)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := checkHistoryTarget(dir, path, name); err != nil {
		return err
	}
	f, tmp, err := createHistoryTemp(dir, name)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = checkHistoryTarget(dir, path, name) // again: the write took time
	}
	if err == nil {
		err = dir.Rename(tmp, name)
	}
	if err != nil {
		dir.Remove(tmp)
	}
	return err
}

// openHistoryDir opens the directory of path, checked
// (checkHistoryDir), and returns it with the file's name in it. The
// directory itself is not followed when it is a symlink; the path to it
// is.
func openHistoryDir(path string) (*os.Root, string, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	if name == "" || name == "." || name == ".." || name == string(filepath.Separator) {
		return nil, "", refuseHistoryFile(path, "names no file")
	}
	dir = filepath.Clean(dir) // "" is "."
	var root *os.Root
	var err error
	if base := filepath.Base(dir); base == "." || base == ".." || base == string(filepath.Separator) || dir == filepath.VolumeName(dir)+string(filepath.Separator) {
		root, err = os.OpenRoot(dir) // the working directory, a parent of it, or the file system's root
	} else {
		var parent *os.Root
		if parent, err = os.OpenRoot(filepath.Dir(dir)); err != nil {
			return nil, "", err
		}
		defer parent.Close()
		var fi fs.FileInfo
		if fi, err = parent.Lstat(base); err != nil {
			return nil, "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, "", refuseHistoryFile(path, "its directory "+dir+" is a symlink: name the directory it points to")
		}
		root, err = parent.OpenRoot(base)
	}
	if err != nil {
		return nil, "", err
	}
	fi, err := root.Stat(".")
	if err == nil {
		if why := checkHistoryDir(fi); why != "" {
			err = refuseHistoryFile(path, "its directory "+dir+" "+why)
		}
	}
	if err != nil {
		root.Close()
		return nil, "", err
	}
	return root, name, nil
}

// checkHistoryTarget refuses a target in dir that is not a regular file:
// replacing a device, a FIFO, a symlink or a directory is never what
// writing a history means.
func checkHistoryTarget(dir *os.Root, path, name string) error {
	fi, err := dir.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return refuseHistoryFile(path, "not a regular file ("+fileTypeText(fi.Mode())+"): it is never replaced")
	}
	return nil
}

// fileTypeText names a file's type for an error.
func fileTypeText(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "type " + m.Type().String()
}

// createHistoryTemp creates a new file beside name in dir, mode 0600,
// never through an existing name (O_EXCL).
func createHistoryTemp(dir *os.Root, name string) (*os.File, string, error) {
	for range 10 {
		tmp := name + "." + strconv.FormatUint(rand.Uint64(), 36) + ".tmp"
		f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, tmp, err
		}
	}
	return nil, "", fmt.Errorf("history file: no free temporary name beside %s", name)
}
