//go:build !linux

package rendezvous

import (
	"fmt"
	"os"
)

// Elsewhere package syscall offers no *at calls on every platform, so a
// Dir reaches its files by path, after checking that the path still names
// the directory that was opened and checked: a directory swapped in
// between that check and the file's open is not caught (docs/security.md).

func openDir(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: errSymlink}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if ofi, err := f.Stat(); err != nil || !os.SameFile(fi, ofi) {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: errReplaced}
	}
	return f, nil
}

var (
	errSymlink  = fmt.Errorf("a symbolic link")
	errReplaced = fmt.Errorf("replaced while it was opened")
)

// same fails unless the path still names the directory opened.
func (d *Dir) same() error {
	fi, err := os.Lstat(d.path)
	if err != nil {
		return &DirError{Dir: d.path, Why: err.Error()}
	}
	ofi, err := d.f.Stat()
	if err != nil || !os.SameFile(fi, ofi) {
		return &DirError{Dir: d.path, Why: "replaced since it was checked"}
	}
	return nil
}

func (d *Dir) open(name string, flag int, perm uint32) (*os.File, error) {
	if err := d.same(); err != nil {
		return nil, err
	}
	return os.OpenFile(d.join(name), flag, os.FileMode(perm))
}

func (d *Dir) exists(name string) bool {
	_, err := os.Lstat(d.join(name))
	return err == nil
}

func (d *Dir) link(old, name string) error {
	if err := d.same(); err != nil {
		return err
	}
	return os.Link(d.join(old), d.join(name))
}

func (d *Dir) rename(old, name string) error {
	if err := d.same(); err != nil {
		return err
	}
	return os.Rename(d.join(old), d.join(name))
}

func (d *Dir) remove(name string) error { return os.Remove(d.join(name)) }
