package refcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// problemStrings is each problem as its String writes it.
func problemStrings(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// tree writes files (slash path -> content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// synthetic is a small module: package lib (a type with a field, a method,
// an embedded type and an interface), package util, and text that names
// them, rightly and wrongly.
var synthetic = map[string]string{
	"go.mod": "module example.com/m\n\ngo 1.25\n",
	"lib/lib.go": `// Package lib is described in docs/lib.md; see also lib/gone.go and
// ROADMAP.md. Heap.Copy moves bytes; Heap.Paste does not exist; Base.Size is
// promoted. The old entry point was lib.Open; lib.New is the new one, and
// (*lib.Heap).Copy, lib.Heap.Copy, lib.Heap.Cut and (*lib.Heap).Glue are
// methods; errors.Is and sync.Pool are not ours. The helpers are in
// helper.go and in util/helpers.go; cpu/cuda are alternatives, not a path.
package lib

import "example.com/m/util"

// Base is embedded.
type Base struct{ util.Inner }

// Size is Base's.
func (Base) Size() int { return 0 }

// Heap is a heap.
type Heap struct {
	Base
	Name string
}

// Copy copies.
func (h *Heap) Copy() {}

// Mover moves.
type Mover interface {
	// Move moves (a rename this comment missed).
	MoveLocal()
}

// New makes a Heap; util.Missing and util.Inner.Depth are named here, and
// the module's example.com/m/util and example.com/m/nothing.
func New() *Heap { return nil }
`,
	"util/util.go": `// Package util is a helper; its tests are util.TestUtil.
package util

// Inner is embedded in lib.Base.
type Inner struct{ Depth int }
`,
	"util/util_test.go": "package util\n\nimport \"testing\"\n\nfunc TestUtil(t *testing.T) {}\n",
	"lib/helper.go":     "package lib\n",
	"docs/lib.md": "# lib\n\nSee [the design](design.md), [the code](../lib/lib.go) and [a gone note](gone.md#top).\n" +
		"`lib.Heap.Name` and `lib.Heap.Size` exist, `lib.Heap.Nom` does not.\n\n" +
		"```go\nh := lib.New()\nlib.Make()\n```\n\nRun `go test ./lib/...` and `go test ./lib/nowhere/...`.\n" +
		"Install with `go get example.com/m@latest`; example.com/m alone is no package.\n",
	"docs/design.md":          "# design\n\nCites lib/helper.go, lib/old, lib/*.go and lib/*.c.\n",
	"vendor/x/x.go":           "// Package x cites lib.Nothing, ignored: vendored.\npackage x\n",
	"lib/testdata/fixture.md": "lib.Ignored: a fixture\n",
}

func TestCheckFindsStaleReferences(t *testing.T) {
	root := tree(t, synthetic)
	problems, unused, err := Check(root, []Allow{
		{File: "docs/design.md", Ref: "lib/old", Why: "the test's documented exception"},
		{File: "docs/design.md", Ref: "never/named", Why: "stale"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.File+":"+itoa(p.Line)+": "+p.Ref)
	}
	want := []string{
		"docs/design.md:3: lib/*.c",
		"docs/lib.md:3: gone.md",
		"docs/lib.md:4: lib.Heap.Nom",
		"docs/lib.md:8: lib.Make",
		"docs/lib.md:11: lib/nowhere",
		"docs/lib.md:12: example.com/m",
		"lib/lib.go:1: lib/gone.go",
		"lib/lib.go:2: Heap.Paste",
		"lib/lib.go:2: ROADMAP.md",
		"lib/lib.go:3: lib.Open",
		"lib/lib.go:4: lib.Heap.Cut",
		"lib/lib.go:4: lib.Heap.Glue",
		"lib/lib.go:6: util/helpers.go",
		"lib/lib.go:28: Move",
		"lib/lib.go:32: util.Missing",
		"lib/lib.go:33: example.com/m/nothing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		for _, p := range problems {
			t.Log(p)
		}
	}
	if len(unused) != 1 || unused[0].Ref != "never/named" {
		t.Errorf("unused allow entries %v, want never/named only", unused)
	}
}

// TestCheckHints: the message says what is missing and where a name like it
// is declared, so a stale reference is quick to fix.
func TestCheckHints(t *testing.T) {
	root := tree(t, synthetic)
	problems, _, err := Check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string]string{}
	for _, p := range problems {
		msgs[p.Ref] = p.String()
	}
	for ref, want := range map[string]string{
		"lib.Open":        "lib/lib.go:3: lib.Open: package lib (lib) declares no Open",
		"lib.Heap.Cut":    "type lib.Heap (lib) has no field or method Cut",
		"Heap.Paste":      "type lib.Heap (lib) has no field or method Paste",
		"util/helpers.go": "no such file or directory",
		"ROADMAP.md":      "no file of this name in the repository",
		"Move":            "the doc comment of MoveLocal begins with Move",
		"util.Missing":    "package util (util) declares no Missing",
	} {
		if !strings.Contains(msgs[ref], want) {
			t.Errorf("%s: message %q, want it to contain %q", ref, msgs[ref], want)
		}
	}
}

// TestCheckHintsOtherPackage: a name declared by another package of the
// module is named in the message.
func TestCheckHintsOtherPackage(t *testing.T) {
	root := tree(t, map[string]string{
		"go.mod":        "module example.com/m\n",
		"a/a.go":        "// Package a: see b.Open.\npackage a\n\n// Open opens.\nfunc Open() {}\n",
		"b/b.go":        "// Package b: b.Close closes.\npackage b\n\n// OpenString opens a string.\nfunc OpenString() {}\n\n// T is a T.\ntype T struct{}\n\n// Close closes.\nfunc (T) Close() {}\n",
		"c/c.go":        "// Package c: the helper is in a.go.\npackage c\n",
		"a/extra_go.md": "nothing\n",
	})
	problems, _, err := Check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := problemStrings(problems)
	want := []string{
		"a/a.go:1: b.Open: package b (b) declares no Open; declared as a.Open (a); similar: b.OpenString",
		"b/b.go:1: b.Close: package b (b) declares no Close; declared as b.T.Close",
		"c/c.go:1: a.go: no file of this name in c: write its path (a file of that name is at a/a.go)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// A top-level folder .gitignore names is a build's output, which a fresh
// clone lacks: a path into it is checked as there, where the folder is
// not a top-level one (gpurun/results after `.ci/gpu build` here).
func TestCheckIgnoresBuildFolders(t *testing.T) {
	files := map[string]string{
		"go.mod":         "module example.com/m\n\ngo 1.25\n",
		".gitignore":     "/out/\n*.test\n",
		"out/bin/tool":   "built\n",
		"kept/file.txt":  "tracked\n",
		"docs/design.md": "# design\n\nResults land in out/results; see kept/file.txt and kept/missing.txt.\n",
		"lib/lib.go":     "// Package lib writes out/results.\npackage lib\n",
	}
	problems, _, err := Check(tree(t, files), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.File+": "+p.Ref)
	}
	if want := []string{"docs/design.md: kept/missing.txt"}; !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v: a path into an ignored build folder is not the repository's", got, want)
	}
}

// An issue number in a comment of a non-test Go file is reported; one in a
// test's comment or in a string literal is not.
func TestCheckFlagsIssueNumbers(t *testing.T) {
	root := tree(t, map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.25\n",
		"lib/lib.go": "// Package lib keeps a rule (issue 21).\npackage lib\n\n" +
			"// Before issues 30 and 31 this was slow; see Issue #7 too.\nconst Title = \"the targets of issue 28\"\n",
		"lib/lib_test.go": "package lib\n\n// Found by issue 21's stress test.\nvar _ = Title\n",
	})
	problems, _, err := Check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.File+":"+itoa(p.Line)+": "+p.Ref)
	}
	want := []string{"lib/lib.go:1: issue 21", "lib/lib.go:4: issues 30"}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
