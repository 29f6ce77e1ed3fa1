//go:build !unix

package alloc

import "io/fs"

// checkHistoryDir accepts every directory where there are no Unix owners
// and modes to check (Windows' access lists are not read): the symlink
// and non-regular-file refusals and the temporary file created beside the
// target still hold.
func checkHistoryDir(fs.FileInfo) string { return "" }
