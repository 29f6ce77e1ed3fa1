//go:build ignore

// Command walk measures the walk of a cold Alloc on the cpu backend: the
// files of the module a first Alloc (a pool miss that reaches the driver)
// passes through, in order (the caller's, this test's, first and last),
// and how often it comes back to a file it had left: the steps of the walk
// less the files. It copies the packages the cpu backend links into a temporary
// module, adds a hook at the start of every function (declared or
// literal) that records the call stack, runs one Alloc on a fresh
// allocator, and rebuilds the walk from the stacks: between two hooks the
// walk returns down to the frame the two stacks share, then calls up to
// the new one. Frames outside the module are transparent. The packages
// copied are those alloc and cpu link (cpu does not import alloc).
//
//	go run .ci/walk/main.go [TREE] [SIZE]
//
// TREE defaults to ".", SIZE (bytes) to 65536. Nothing in TREE changes.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

const module = "github.com/capalloc/capalloc"

func main() {
	tree, size := ".", "65536"
	if len(os.Args) > 1 {
		tree = os.Args[1]
	}
	if len(os.Args) > 2 {
		size = os.Args[2]
	}
	tmp, err := os.MkdirTemp("", "walk")
	check(err)
	defer os.RemoveAll(tmp)
	for _, f := range []string{"go.mod", "go.sum"} {
		copyFile(filepath.Join(tree, f), filepath.Join(tmp, f))
	}
	out, err := cmd(tree, "go", "list", "-deps", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \",\"}} {{join .SFiles \",\"}}", "./alloc", "./cpu")
	check(err)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if !strings.HasPrefix(f[0], module) {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		for _, name := range strings.Split(f[2], ",") {
			instrument(filepath.Join(f[1], name), filepath.Join(tmp, rel, name))
		}
		if len(f) > 3 {
			for _, name := range strings.Split(f[3], ",") {
				copyFile(filepath.Join(f[1], name), filepath.Join(tmp, rel, name))
			}
		}
	}
	spy := filepath.Join(tmp, "internal", "walkspy")
	check(os.MkdirAll(spy, 0o755))
	check(os.WriteFile(filepath.Join(spy, "walkspy.go"), []byte(spySrc), 0o644))
	check(os.WriteFile(filepath.Join(spy, "walk_test.go"), []byte(strings.ReplaceAll(testSrc, "SIZE", size)), 0o644))
	out, err = cmd(tmp, "go", "test", "-count=1", "-gcflags=all=-l", "-run", "TestWalk", "-v", "./internal/walkspy")
	fmt.Print(out)
	check(err)
}

// instrument copies a Go file, with walkspy.Hit() first in every function
// body. The text is inserted in place, on the lines it was, so positions
// and compiler directives stay as they were.
func instrument(src, dst string) {
	text, err := os.ReadFile(src)
	check(err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, src, text, parser.ParseComments)
	check(err)
	var at []int // offsets after which to insert the hook
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Body != nil {
				at = append(at, fset.Position(n.Body.Lbrace).Offset+1)
			}
		case *ast.FuncLit:
			at = append(at, fset.Position(n.Body.Lbrace).Offset+1)
		}
		return true
	})
	var buf bytes.Buffer
	last := 0
	name := fset.Position(f.Name.End()).Offset
	if len(at) > 0 {
		buf.Write(text[:name])
		fmt.Fprintf(&buf, "; import walkspy %q", module+"/internal/walkspy")
		last = name
	}
	sort.Ints(at)
	for _, o := range at {
		buf.Write(text[last:o])
		buf.WriteString("walkspy.Hit();")
		last = o
	}
	buf.Write(text[last:])
	check(os.MkdirAll(filepath.Dir(dst), 0o755))
	check(os.WriteFile(dst, buf.Bytes(), 0o644))
}

func copyFile(src, dst string) {
	b, err := os.ReadFile(src)
	check(err)
	check(os.MkdirAll(filepath.Dir(dst), 0o755))
	check(os.WriteFile(dst, b, 0o644))
}

func cmd(dir string, name string, args ...string) (string, error) {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "WALK_ROOT="+dir)
	b, err := c.CombinedOutput()
	return string(b), err
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "walk:", err)
		os.Exit(1)
	}
}

const spySrc = `// Package walkspy records the module's call stacks at function entries.
package walkspy

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

var (
	on     atomic.Bool
	mu     sync.Mutex
	Stacks [][]runtime.Frame // the module's frames, outermost first
	Root   = os.Getenv("WALK_ROOT") + "/"
)

func Start() { Stacks = nil; on.Store(true) }
func Stop()  { on.Store(false) }

// Hit records the caller's stack, when on.
func Hit() {
	if on.Load() {
		Mark()
	}
}

// Mark records the caller's caller's stack.
func Mark() {
	pcs := make([]uintptr, 256)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var st []runtime.Frame
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.File, Root) {
			st = append([]runtime.Frame{f}, st...)
		}
		if !more {
			break
		}
	}
	mu.Lock()
	Stacks = append(Stacks, st)
	mu.Unlock()
}
`

const testSrc = `package walkspy_test

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/internal/walkspy"
)

func TestWalk(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	before := a.Stats().DriverAllocs
	walkspy.Start()
	b, err := a.Alloc(SIZE)
	walkMark()
	walkspy.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if a.Stats().DriverAllocs == before {
		t.Fatal("the Alloc did not reach the driver")
	}
	_ = a.Free(b)
	name := func(f runtime.Frame) string {
		if strings.HasSuffix(f.Function, ".TestWalk") {
			return "(caller)"
		}
		return strings.TrimPrefix(f.File, walkspy.Root)
	}
	var walk []string
	visit := func(f runtime.Frame) {
		if n := name(f); len(walk) == 0 || walk[len(walk)-1] != n {
			walk = append(walk, n)
		}
	}
	var prev []runtime.Frame
	for _, st := range walkspy.Stacks {
		if len(st) == 0 || !strings.HasSuffix(st[0].Function, ".TestWalk") {
			continue // another goroutine's
		}
		// The frames shared with the previous stack are the same calls:
		// the same functions, every caller at the same call site. The
		// top frame is always a new call (its hook just ran).
		common := 0
		for common < len(prev) && common < len(st)-1 && prev[common].Function == st[common].Function &&
			(common == 0 || prev[common-1].PC == st[common-1].PC) {
			common++
		}
		for i := len(prev) - 2; i >= common-1 && i >= 0; i-- { // returns
			visit(prev[i])
		}
		for i := common; i < len(st); i++ { // calls
			visit(st[i])
		}
		prev = st
	}
	entered := map[string]int{}
	for _, f := range walk {
		entered[f]++
	}
	var files []string
	for f := range entered {
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		return entered[files[i]] > entered[files[j]] || entered[files[i]] == entered[files[j]] && files[i] < files[j]
	})
	fmt.Printf("walk of a cold Alloc(SIZE) on cpu: %d steps, %d files, %d returns to a file already left\n", len(walk), len(files), len(walk)-len(files))
	fmt.Println(strings.Join(walk, " > "))
	for _, f := range files {
		fmt.Printf("  %-32s entered %d\n", f, entered[f])
	}
}

//go:noinline
func walkMark() { walkspy.Mark() }
`
