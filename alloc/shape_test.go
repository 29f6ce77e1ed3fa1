package alloc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The package's shape (docs/design.md, "Layers"): package alloc is what
// an engine calls, so what it exports stays small; no type gathers every
// concern again; no file grows past what one reading holds. A change that
// needs more says why here: the budget of 106 names holds graph pools (a
// type, its methods and the allocator's method that makes one), the two
// option parsers, the allocator's summary and the history writer,
// Allocator.WatchdogTimeout, which lets the nccl package bound its waits
// by the allocator's own deadline, and Graph.ID, Graph.Name, GraphPool.Name
// and GraphPool.SetName, so views, metrics and messages can say which
// graph and pool they mean. Host memory beyond HostAlloc
// (docs/host-memory.md) is a type of its own, Host, reached with
// Allocator.Host so that Allocator's methods do not grow: the type, that
// method, Host.Register and HostBuffer.DevicePtr; managed and mapped
// memory add Host.AllocManaged, Host.Prefetch, Host.MapHost and Prefetch's
// destination (Place, OnDevice, OnHost); OutOfMemoryInfo is what
// Options.OnOutOfMemory is given.
const (
	maxExports     = 106 // exported top-level names plus exported methods of exported types
	maxMethods     = 50  // methods of any one type, unexported included
	maxFileLines   = 400 // non-test files
	shapeTestLabel = "docs/design.md, Layers"
)

func TestPackageShape(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	methods := map[string]int{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s has %d lines, more than %d (%s): split it by concept", name, n, maxFileLines, shapeTestLabel)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					if d.Name.IsExported() {
						exported = append(exported, d.Name.Name)
					}
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				id, ok := typ.(*ast.Ident)
				if !ok {
					continue
				}
				methods[id.Name]++
				if id.IsExported() && d.Name.IsExported() {
					exported = append(exported, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							exported = append(exported, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								exported = append(exported, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(exported) > maxExports {
		sort.Strings(exported)
		t.Errorf("package alloc exports %d names, more than %d (%s): what only backends, views or tests need belongs in alloc/driver, alloc/memmap or an internal package\n%s",
			len(exported), maxExports, shapeTestLabel, strings.Join(exported, " "))
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("type %s has %d methods, more than %d (%s): give a concern a type of its own", typ, n, maxMethods, shapeTestLabel)
		}
	}
}
