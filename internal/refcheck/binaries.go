package refcheck

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// executableMagic are the first bytes of the executables and object files
// a build makes here: ELF (Linux), Mach-O thin (32 and 64 bit, either byte
// order) and fat (macOS).
var executableMagic = [][]byte{
	{0x7f, 'E', 'L', 'F'},
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
}

// TrackedExecutables lists the files git tracks in the repository at root
// (git ls-files) that begin as a built executable or object file does: a
// binary built from the repository's source belongs in .gitignore, not in
// the history every clone carries. Outside a git work tree (an exported
// copy) every file counts as tracked but those the root .gitignore's
// simple entries name.
func TrackedExecutables(root string) ([]string, error) {
	names, err := trackedFiles(root)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, name := range names {
		head, err := readHead(filepath.Join(root, filepath.FromSlash(name)), 4)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet from the index
			}
			return nil, err
		}
		for _, m := range executableMagic {
			if bytes.Equal(head, m) {
				found = append(found, name)
				break
			}
		}
	}
	return found, nil
}

// trackedFiles lists the files git tracks at root, slash paths relative
// to it; outside a work tree, the files a walk finds, less .git and what
// the root .gitignore names as "/name", "/name/" or "*.ext".
func trackedFiles(root string) ([]string, error) {
	if exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Run() == nil {
		out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00"), nil
	}
	var anchored, suffixes []string
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			switch {
			case strings.HasPrefix(l, "/"):
				anchored = append(anchored, strings.Trim(l, "/"))
			case strings.HasPrefix(l, "*.") && !strings.ContainsAny(l[1:], "*/?["):
				suffixes = append(suffixes, l[1:])
			}
		}
	}
	var names []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(mustRel(root, p))
		if rel == ".git" || slices.Contains(anchored, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && !slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(rel, s) }) {
			names = append(names, rel)
		}
		return nil
	})
	return names, err
}

// readHead returns the first n bytes of the file at p (fewer if it is
// shorter; none for a directory such as a submodule's).
func readHead(p string, n int) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, err
	}
	b := make([]byte, n)
	k, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return b[:k], err
}
