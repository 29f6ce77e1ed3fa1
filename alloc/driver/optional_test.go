package driver_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// optionalInterfaces returns the interface types optional.go declares, in
// its order: the optional interfaces, by definition.
func optionalInterfaces(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "optional.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, s := range g.Specs {
			ts := s.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.InterfaceType); ok && ts.Name.IsExported() {
				names = append(names, ts.Name.Name)
			}
		}
	}
	return names
}

// The optional interfaces are listed in two places besides optional.go:
// the package's documentation (doc.go) and docs/design.md ("Layers", the
// contract). Both list exactly optional.go's interfaces, and design.md's
// count is theirs; an interface added or removed without them fails here.
func TestOptionalInterfacesAreListed(t *testing.T) {
	want := optionalInterfaces(t)
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatal("optional.go declares no interface")
	}

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The bullet "Optional interfaces, ..." up to the next bullet.
	_, rest, ok := strings.Cut(string(doc), "//   - Optional interfaces")
	if !ok {
		t.Fatal(`doc.go has no "Optional interfaces" bullet`)
	}
	bullet, _, _ := strings.Cut(rest, "//   - ")
	var got []string
	for _, m := range regexp.MustCompile(`\[([A-Z]\w*)\]`).FindAllStringSubmatch(bullet, -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("doc.go lists the optional interfaces %v; optional.go declares %v", got, want)
	}

	design, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`every optional interface \(the (\d+) of alloc/driver/optional.go\):([^.]*)\.`).FindSubmatch(design)
	if m == nil {
		t.Fatal(`docs/design.md has no "every optional interface (the N of alloc/driver/optional.go): ..." sentence`)
	}
	got = nil
	for _, n := range regexp.MustCompile("`([A-Z]\\w*)`").FindAllSubmatch(m[2], -1) {
		got = append(got, string(n[1]))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("docs/design.md lists the optional interfaces %v; optional.go declares %v", got, want)
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(want) {
		t.Errorf("docs/design.md counts %d optional interfaces; optional.go declares %d", n, len(want))
	}
}
