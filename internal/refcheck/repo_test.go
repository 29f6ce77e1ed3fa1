package refcheck

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRepository runs the check on this repository: every path, package
// and identifier a comment or a document names exists, or is an entry of
// allowlist.txt.
func TestRepository(t *testing.T) {
	root := repoRoot(t)
	allow, err := readAllowlist("allowlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	problems, unused, err := Check(root, allow)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	for _, a := range unused {
		t.Errorf("internal/refcheck/allowlist.txt: %s %s matches nothing any more: remove the entry", a.File, a.Ref)
	}
}

// readAllowlist reads lines "file ref  # why"; the why is required.
func readAllowlist(name string) ([]Allow, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Allow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		entry, why, _ := strings.Cut(l, "#")
		fs := strings.Fields(entry)
		if len(fs) != 2 || strings.TrimSpace(why) == "" {
			return nil, &os.PathError{Op: "parse line " + strings.TrimSpace(l), Path: name, Err: os.ErrInvalid}
		}
		out = append(out, Allow{File: fs[0], Ref: fs[1], Why: strings.TrimSpace(why)})
	}
	return out, sc.Err()
}

// TestDesignIndexesEveryNote: docs/design.md's index points to every note
// in docs/.
func TestDesignIndexesEveryNote(t *testing.T) {
	design, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	notes, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		name := "docs/" + filepath.Base(n)
		if name != "docs/design.md" && !strings.Contains(string(design), name) {
			t.Errorf("docs/design.md does not point to %s: add it to the index", name)
		}
	}
}

// TestLayers: no package of this repository imports a layer above its own
// (docs/design.md, "Layers", read by CheckLayers: the table there is the
// only copy of the rule).
func TestLayers(t *testing.T) {
	root := repoRoot(t)
	problems, err := CheckLayers(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
}

// TestNoTrackedExecutables: git tracks no built binary (go build's output
// at the root, a test binary, an object file); .gitignore names them.
func TestNoTrackedExecutables(t *testing.T) {
	root := repoRoot(t)
	found, err := TrackedExecutables(root)
	if err != nil {
		t.Fatalf("git ls-files: %v (the check needs git and the repository's .git)", err)
	}
	for _, f := range found {
		t.Errorf("%s is a built executable tracked by git: git rm --cached it and add it to .gitignore", f)
	}
}
