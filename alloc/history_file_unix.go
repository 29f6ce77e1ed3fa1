//go:build unix

package alloc

import (
	"io/fs"
	"os"
	"syscall"
)

// checkHistoryDir says why the directory fi describes must not hold a
// history file, or "" when it may: it belongs to the process's user or to
// root, and others can write to it only when it is sticky (as /tmp is),
// where they cannot rename or remove what the process created. Another
// user's directory, or one others could swap files in, would let them
// read the history or replace it.
func checkHistoryDir(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "cannot be checked"
	}
	if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
		return "belongs to another user"
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return "is writable by others and not sticky"
	}
	return ""
}
