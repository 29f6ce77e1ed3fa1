package refcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// pkg is what one directory of the module declares, read with go/parser:
// enough to resolve pkg.Name and pkg.Type.Member without type checking.
type pkg struct {
	dir   string // slash path relative to the root ("" for the root)
	name  string // the package clause of its non-test files
	top   map[string]declared
	types map[string]*typ
}

// declared says where a name is declared. Every reference sees test
// declarations too (text names tests: nccl.FuzzEnvFrom); hints suggest
// only non-test ones.
type declared struct{ nonTest bool }

// typ is one type declaration: its fields and methods, what it embeds, and
// what it aliases or is defined as (type X = Y, type X Y).
type typ struct {
	members map[string]declared
	embeds  []typeRef
	target  *typeRef // alias or defined-as a named type: its members count too
}

// typeRef names a type: in a package of the module (p), or elsewhere
// (external: its members cannot be known, so any member resolves).
type typeRef struct {
	p        *pkg
	name     string
	external bool
}

// goFile is one parsed .go file with what its comments need.
type goFile struct {
	rel     string // slash path relative to the root
	test    bool
	p       *pkg // nil for an external test package (x_test)
	ast     *ast.File
	imports map[string]string // name in this file -> import path
}

// module is the parsed repository.
type module struct {
	root    string
	path    string          // module path from go.mod
	byDir   map[string]*pkg // directory -> package
	byName  map[string][]*pkg
	files   []*goFile
	fset    *token.FileSet
	topDirs map[string]bool     // entries of the root directory
	base    map[string][]string // file base name -> paths
	literal map[string]bool     // words of the Go code's string literals
}

// skipDir reports whether a directory is outside the check: hidden
// directories, vendor, testdata (fixtures, not the repository's own text)
// and nested modules.
func skipDir(root, p string, d os.DirEntry) bool {
	if p == root {
		return false
	}
	n := d.Name()
	if strings.HasPrefix(n, ".") || n == "vendor" || n == "testdata" || n == "node_modules" {
		return true
	}
	if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
		return true
	}
	return false
}

// walkModuleFiles calls fn with the slash-separated path, relative to
// root, of every file in the directories the module's packages live in
// (skipDir's), in lexical order; fn's error stops the walk.
func walkModuleFiles(root string, fn func(rel string) error) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(root, p, d) {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(filepath.ToSlash(mustRel(root, p)))
	})
}

func loadModule(root string) (*module, []string, error) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, nil, err
	}
	m := &module{
		root:    root,
		byDir:   map[string]*pkg{},
		byName:  map[string][]*pkg{},
		fset:    token.NewFileSet(),
		topDirs: map[string]bool{},
		base:    map[string][]string{},
		literal: map[string]bool{},
	}
	m.path = modulePath(gomod)
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, err
	}
	// A top-level folder .gitignore names ("/gpurun/") is a build's output,
	// not the repository's: a fresh clone has none, so a path into it is
	// checked as a fresh clone would see it.
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") && strings.Count(strings.TrimSuffix(l, "/"), "/") == 1 {
				ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	for _, e := range ents {
		if !ignored[e.Name()] {
			m.topDirs[e.Name()] = true
		}
	}
	var mds []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(mustRel(root, p))
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		// Every file, fixtures included, can be named by its base name.
		m.base[d.Name()] = append(m.base[d.Name()], rel)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = walkModuleFiles(root, func(rel string) error {
		switch {
		case strings.HasSuffix(rel, ".md"):
			mds = append(mds, rel)
		case strings.HasSuffix(rel, ".go"):
			if err := m.parseGo(rel); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range m.byDir {
		if p.name != "main" && p.name != "" {
			m.byName[p.name] = append(m.byName[p.name], p)
		}
	}
	for _, f := range m.files {
		m.resolveFile(f)
	}
	return m, mds, nil
}

// modulePath is the module path a go.mod file declares.
func modulePath(gomod []byte) string {
	var p string
	for _, l := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			p = strings.Trim(f[1], `"`)
		}
	}
	return p
}

func mustRel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

func (m *module) parseGo(rel string) error {
	f, err := parser.ParseFile(m.fset, filepath.Join(m.root, filepath.FromSlash(rel)), nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	dir := path.Dir(rel)
	if dir == "." {
		dir = ""
	}
	p := m.byDir[dir]
	if p == nil {
		p = &pkg{dir: dir, top: map[string]declared{}, types: map[string]*typ{}}
		m.byDir[dir] = p
	}
	test := strings.HasSuffix(rel, "_test.go")
	gf := &goFile{rel: rel, test: test, ast: f, p: p}
	// An external test package (alloc_test) counts as its package: text
	// names its tests (nccl.FuzzEnvFrom) as it names the rest.
	name := strings.TrimSuffix(f.Name.Name, "_test")
	if !test || p.name == "" {
		p.name = name
	}
	m.files = append(m.files, gf)
	// Names the code itself reads or writes ("results.json") are files
	// of a run, not of the repository. Tests' literals are fixtures (this
	// package's own hold stale names on purpose): not counted.
	if test {
		return nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			for _, w := range strings.FieldsFunc(bl.Value, func(r rune) bool {
				return strings.ContainsRune(" \t\n\"`'/=:?,()[]{}<>", r)
			}) {
				m.literal[w] = true
			}
		}
		return true
	})
	return nil
}

// resolveFile records f's imports and its declarations into its package.
// It runs after every directory is known, so embedded types of other
// packages of the module resolve.
func (m *module) resolveFile(f *goFile) {
	f.imports = map[string]string{}
	for _, im := range f.ast.Imports {
		ip := strings.Trim(im.Path.Value, `"`)
		name := ""
		if im.Name != nil {
			name = im.Name.Name
		} else if p := m.pkgOfImport(ip); p != nil {
			name = p.name
		} else {
			name = guessName(ip)
		}
		f.imports[name] = ip
	}
	if f.p == nil {
		return
	}
	p, d := f.p, declared{nonTest: !f.test}
	note := func(set map[string]declared, n string) {
		if old, ok := set[n]; !ok || !old.nonTest {
			set[n] = d
		}
	}
	typeOf := func(n string) *typ {
		t := p.types[n]
		if t == nil {
			t = &typ{members: map[string]declared{}}
			p.types[n] = t
		}
		return t
	}
	for _, decl := range f.ast.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				note(p.top, decl.Name.Name)
				continue
			}
			if rn := recvName(decl.Recv.List[0].Type); rn != "" {
				note(typeOf(rn).members, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range decl.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						note(p.top, n.Name)
					}
				case *ast.TypeSpec:
					note(p.top, s.Name.Name)
					t := typeOf(s.Name.Name)
					m.typeBody(f, t, s.Type, d)
				}
			}
		}
	}
}

// typeBody records the members a type's definition gives it.
func (m *module) typeBody(f *goFile, t *typ, e ast.Expr, d declared) {
	note := func(n string) {
		if old, ok := t.members[n]; !ok || !old.nonTest {
			t.members[n] = d
		}
	}
	switch e := e.(type) {
	case *ast.StructType:
		for _, fl := range e.Fields.List {
			if len(fl.Names) == 0 {
				if r, ok := m.ref(f, fl.Type); ok {
					note(r.name)
					t.embeds = append(t.embeds, r)
				}
				continue
			}
			for _, n := range fl.Names {
				note(n.Name)
			}
		}
	case *ast.InterfaceType:
		for _, fl := range e.Methods.List {
			if len(fl.Names) == 0 {
				if r, ok := m.ref(f, fl.Type); ok {
					t.embeds = append(t.embeds, r)
				}
				continue
			}
			for _, n := range fl.Names {
				note(n.Name)
			}
		}
	default:
		if r, ok := m.ref(f, e); ok {
			t.target = &r
		}
	}
}

// ref resolves a type expression naming a type (T, *T, pkg.T, T[U]).
func (m *module) ref(f *goFile, e ast.Expr) (typeRef, bool) {
	switch e := e.(type) {
	case *ast.StarExpr:
		return m.ref(f, e.X)
	case *ast.IndexExpr:
		return m.ref(f, e.X)
	case *ast.IndexListExpr:
		return m.ref(f, e.X)
	case *ast.ParenExpr:
		return m.ref(f, e.X)
	case *ast.Ident:
		return typeRef{p: f.p, name: e.Name}, true
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return typeRef{}, false
		}
		if p := m.pkgOfImport(f.imports[x.Name]); p != nil {
			return typeRef{p: p, name: e.Sel.Name}, true
		}
		return typeRef{name: e.Sel.Name, external: true}, true
	}
	return typeRef{}, false
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.ParenExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// pkgOfImport is the module's package at import path ip, or nil.
func (m *module) pkgOfImport(ip string) *pkg {
	if ip == m.path {
		return m.byDir[""]
	}
	if rest, ok := strings.CutPrefix(ip, m.path+"/"); ok {
		return m.byDir[rest]
	}
	return nil
}

// guessName is the package name an import path outside the module most
// likely declares: its last element, less a go- prefix or a -go / .vN
// suffix, or the element before a major version (v2).
func guessName(ip string) string {
	els := strings.Split(ip, "/")
	n := els[len(els)-1]
	if len(els) > 1 && len(n) > 1 && n[0] == 'v' && strings.Trim(n[1:], "0123456789") == "" {
		n = els[len(els)-2]
	}
	if i := strings.Index(n, ".v"); i > 0 {
		n = n[:i]
	}
	n = strings.TrimPrefix(n, "go-")
	n = strings.TrimSuffix(n, "-go")
	return strings.ReplaceAll(n, "-", "")
}

// hasMember reports whether type name of p has member (a field, a method,
// an embedded type's, or an external embed's, which cannot be known).
func (m *module) hasMember(p *pkg, name, member string, depth int) bool {
	if depth > 8 {
		return true
	}
	t := p.types[name]
	if t == nil {
		return false
	}
	if _, ok := t.members[member]; ok {
		return true
	}
	for _, e := range append(t.embeds, deref(t.target)...) {
		if e.external || e.p == nil {
			return true
		}
		if _, ok := e.p.types[e.name]; !ok {
			continue // a predeclared type (int, string): no members
		}
		if m.hasMember(e.p, e.name, member, depth+1) {
			return true
		}
	}
	return false
}

func deref(r *typeRef) []typeRef {
	if r == nil {
		return nil
	}
	return []typeRef{*r}
}
