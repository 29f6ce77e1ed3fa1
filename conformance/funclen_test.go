package conformance

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFuncLines bounds every function of the package, counted from its
// func keyword to its closing brace: the suite reads as a specification,
// one rule a screen, and a long case becomes a table or named phases.
const maxFuncLines = 80

// TestNoFunctionOver80Lines holds every function of package conformance,
// test files included, declared or literal, to maxFuncLines.
//
// go test runs it in the package's directory; a test binary run
// elsewhere (.ci/run's arm64 binary under qemu runs from the repository
// root) has no source to read and says so.
func TestNoFunctionOver80Lines(t *testing.T) {
	if _, err := os.Stat("funclen_test.go"); err != nil {
		wd, _ := os.Getwd()
		t.Skipf("not in the package's source directory (%s): the bound is checked where go test runs", wd)
	}
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		require.Contains(t, []string{"conformance", "conformance_test"}, f.Name.Name, "%s is not package conformance", name)
		files = append(files, f)
	}
	for _, long := range longFunctions(fset, files, maxFuncLines) {
		t.Errorf("%s: split it into named checks, a table or phases", long)
	}
}

// longFunctions lists the functions of files over max lines, as
// "file:line: name is N lines (at most max)".
func longFunctions(fset *token.FileSet, files []*ast.File, max int) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			switch fn := n.(type) {
			case *ast.FuncDecl:
				name = fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					name = recvName(fn.Recv.List[0].Type) + "." + name
				}
			case *ast.FuncLit:
				name = "a function literal"
			default:
				return true
			}
			start, end := fset.Position(n.Pos()), fset.Position(n.End())
			if lines := end.Line - start.Line + 1; lines > max {
				out = append(out, fmt.Sprintf("%s:%d: %s is %d lines (at most %d)", start.Filename, start.Line, name, lines, max))
			}
			return true
		})
	}
	return out
}

// recvName is a method receiver's type name, without the pointer.
func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return fmt.Sprint(e)
}

// The check finds a method, a function and a literal one line too long,
// and passes one at the bound.
func TestLongFunctionsFindsEachKind(t *testing.T) {
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package p\n\n" +
		"type s struct{}\n\n" +
		"func (*s) method() {\n" + body(5) + "}\n\n" +
		"func plain() {\n" + body(4) + "}\n\n" +
		"var lit = func() {\n" + body(5) + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	require.NoError(t, err)
	require.Equal(t, []string{
		"p.go:5: s.method is 5 lines (at most 4)",
		"p.go:16: a function literal is 5 lines (at most 4)",
	}, longFunctions(fset, []*ast.File{f}, 4))
}
