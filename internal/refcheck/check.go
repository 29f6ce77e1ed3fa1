// Package refcheck checks that the repository's text points at things that
// exist. It reads every .md file and the comments of every .go file (not
// vendor, testdata, hidden directories, nested modules or generated files)
// and reports each reference to
//
//   - a repository file or directory that does not exist (alloc/guard.go,
//     docs/design.md, internal/osthread, a relative markdown link, or a
//     bare file name: in a Go comment a file of its package);
//   - a package of this module that does not exist (its import path);
//   - an exported identifier, qualified by the name of a package of this
//     module, that the package does not declare: pkg.Name,
//     pkg.Type.Member, (*pkg.Type).Member, and, in a package's own
//     comments, Type.Member for a type the package declares;
//   - a doc comment that begins with a name like, but not, the one it
//     documents (Copy on CopyLocal);
//   - an issue number (the word issue, or issues, and a number) in a
//     comment of a non-test Go file: the repository has no issue tracker a reader could
//     follow, so a comment says what holds and why, and history goes in
//     commit messages and docs/reliability.md.
//
// Identifiers are resolved by parsing the module's packages with go/parser
// (top-level declarations, fields, methods, embedded types); nothing is
// type checked. Qualifiers that are not a package of this module
// (errors.Is, sync.Pool) are left alone, as are those a Go file imports
// from outside the module under the same name. The test of this package
// runs the check on the repository, so `go test ./...` (CI) fails on a
// stale reference.
package refcheck

import (
	"fmt"
	"go/ast"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Problem is one reference to something that does not exist.
type Problem struct {
	File string // slash path relative to the root
	Line int
	Ref  string // the reference as written
	Msg  string // what is missing, and a hint where one helps
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Ref, p.Msg) }

// Allow is a documented exception: Ref, written in File, is not reported.
type Allow struct {
	File, Ref, Why string
}

// Check runs the check on the module rooted at root (the directory of its
// go.mod). It returns the problems in file and line order and the allow
// entries that matched nothing (stale exceptions).
func Check(root string, allow []Allow) (problems []Problem, unused []Allow, err error) {
	m, mds, err := loadModule(root)
	if err != nil {
		return nil, nil, err
	}
	c := &checker{m: m, seen: map[string]bool{}}
	for _, f := range m.files {
		if ast.IsGenerated(f.ast) {
			continue
		}
		c.docNames(f)
		for _, cg := range f.ast.Comments {
			for _, cm := range cg.List {
				line := m.fset.Position(cm.Slash).Line
				for i, l := range strings.Split(cm.Text, "\n") {
					c.goLine(f, line+i, l)
				}
			}
		}
	}
	for _, md := range mds {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(md)))
		if err != nil {
			return nil, nil, err
		}
		for i, l := range strings.Split(string(b), "\n") {
			c.mdLine(md, i+1, l)
		}
	}
	used := make([]bool, len(allow))
	for _, p := range c.problems {
		i := slices.IndexFunc(allow, func(a Allow) bool { return a.File == p.File && a.Ref == p.Ref })
		if i >= 0 {
			used[i] = true
			continue
		}
		problems = append(problems, p)
	}
	for i, a := range allow {
		if !used[i] {
			unused = append(unused, a)
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		if problems[i].Line != problems[j].Line {
			return problems[i].Line < problems[j].Line
		}
		return problems[i].Ref < problems[j].Ref
	})
	return problems, unused, nil
}

type checker struct {
	m        *module
	problems []Problem
	seen     map[string]bool
	reImport *regexp.Regexp // the module's import paths
}

func (c *checker) report(file string, line int, ref, msg string) {
	k := fmt.Sprintf("%s:%d:%s", file, line, ref)
	if c.seen[k] {
		return
	}
	c.seen[k] = true
	c.problems = append(c.problems, Problem{File: file, Line: line, Ref: ref, Msg: msg})
}

var (
	// (*pkg.Type).Member
	reMethodExpr = regexp.MustCompile(`\(\*([a-z][a-z0-9_]*)\.([A-Z]\w*)\)\.(\w+)`)
	// pkg.Name or pkg.Type.Member, the qualifier not itself qualified or
	// part of a path.
	reQualified = regexp.MustCompile(`(?:^|[^\w.*/\-])([a-z][a-z0-9_]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	// Type.Member, unqualified: checked in the comments of the package
	// that declares Type.
	reLocal = regexp.MustCompile(`(?:^|[^\w.*/\-])([A-Z]\w*)\.([A-Z]\w*)`)
	// A command-line flag, just before a flag's argument.
	reFlag = regexp.MustCompile(`(?:^|\s)--?[\w.\-]+\s+$`)
	// An issue number, as history cites it.
	reIssue = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]+`)
	// Functions go test runs.
	reTestFunc = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)`)
	// An exported identifier.
	reIdent = regexp.MustCompile(`^[A-Z]\w*$`)
	// Runs of characters a path is made of.
	rePath = regexp.MustCompile(`[A-Za-z0-9_.\-/*]+`)
	// Markdown link targets.
	reLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A bare file name the check looks for (with a slash, any name is).
	reFileName = regexp.MustCompile(`^[A-Za-z0-9_\-.]*[A-Za-z0-9_]\.(go|md|c|cu|ptx|s|sh|proto|json|png|mod|sum|yml|yaml)$`)
)

// goLine checks one line of a comment of f.
func (c *checker) goLine(f *goFile, line int, text string) {
	if m := reIssue.FindString(text); m != "" && !f.test {
		c.report(f.rel, line, m, "a comment cites an issue number: say what holds and why (history goes in the commit message and docs/reliability.md)")
	}
	dir := path.Dir(f.rel)
	c.paths(f.rel, dir, line, text, true)
	c.importPaths(f.rel, line, text)
	c.qualified(f.rel, line, text, func(q string) bool {
		// A name the file imports from outside the module is that package.
		ip, ok := f.imports[q]
		return ok && c.m.pkgOfImport(ip) == nil
	})
	if f.p != nil {
		for _, sm := range reLocal.FindAllStringSubmatchIndex(text, -1) {
			tn, mn := text[sm[2]:sm[3]], text[sm[4]:sm[5]]
			if _, ok := f.p.types[tn]; !ok {
				continue
			}
			if !c.m.hasMember(f.p, tn, mn, 0) {
				c.report(f.rel, line, tn+"."+mn, c.noMember(f.p, tn, mn))
			}
		}
	}
}

// docNames checks that the doc comment of a function or method does not
// begin with another name than the one it documents, where the two are
// alike (Copy on CopyLocal): the mark of a rename the comment missed.
// Tests, whose comments begin with what they test, are left alone.
func (c *checker) docNames(f *goFile) {
	check := func(doc *ast.CommentGroup, name *ast.Ident) {
		if doc == nil || name == nil || !ast.IsExported(name.Name) {
			return
		}
		w, _, _ := strings.Cut(strings.TrimSpace(doc.Text()), " ")
		if w == name.Name || !reIdent.MatchString(w) || !similarName(w, name.Name) {
			return
		}
		c.report(f.rel, c.m.fset.Position(doc.Pos()).Line, w, "the doc comment of "+name.Name+" begins with "+w)
	}
	ast.Inspect(f.ast, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if !reTestFunc.MatchString(n.Name.Name) {
				check(n.Doc, n.Name)
			}
		case *ast.Field: // an interface's method
			if _, ok := n.Type.(*ast.FuncType); ok && len(n.Names) == 1 {
				check(n.Doc, n.Names[0])
			}
		}
		return true
	})
}

// mdLine checks one line of a markdown file, code blocks included.
func (c *checker) mdLine(file string, line int, text string) {
	dir := path.Dir(file)
	for _, sm := range reLink.FindAllStringSubmatch(text, -1) {
		t := sm[1]
		if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") || strings.HasPrefix(t, "#") {
			continue
		}
		t, _, _ = strings.Cut(t, "#")
		if !c.exists(path.Join(dir, t)) {
			c.report(file, line, t, "link target "+path.Join(dir, t)+" does not exist"+c.baseHint(path.Base(t)))
		}
	}
	c.paths(file, dir, line, text, false)
	c.importPaths(file, line, text)
	c.qualified(file, line, text, func(string) bool { return false })
}

func (c *checker) exists(rel string) bool {
	if strings.HasPrefix(rel, "../") || rel == ".." {
		return false
	}
	_, err := os.Stat(filepath.Join(c.m.root, filepath.FromSlash(rel)))
	return err == nil
}

func (c *checker) glob(rel string) bool {
	ms, _ := filepath.Glob(filepath.Join(c.m.root, filepath.FromSlash(rel)))
	return len(ms) > 0
}

// paths checks the repository paths named in text, written in a file of
// directory dir: relative to the root or to dir.
func (c *checker) paths(file, dir string, line int, text string, goComment bool) {
	for _, ix := range rePath.FindAllStringIndex(text, -1) {
		tok := text[ix[0]:ix[1]]
		if ix[0] > 0 && strings.ContainsRune(":@$%~\\=", rune(text[ix[0]-1])) {
			continue // a URL's scheme, an address, a variable, a flag's value
		}
		if ix[1] < len(text) && strings.ContainsRune("{(", rune(text[ix[1]])) {
			continue // a brace pattern or a call
		}
		tok = strings.TrimSuffix(tok, "/...")
		tok = strings.TrimRight(tok, ".-")
		tok = strings.TrimPrefix(tok, "./")
		if tok == "" || strings.HasPrefix(tok, "/") || strings.Contains(tok, "...") || strings.Contains(tok, "//") {
			continue
		}
		els := strings.Split(strings.TrimSuffix(tok, "/"), "/")
		if len(els) == 1 {
			if !reFileName.MatchString(tok) || strings.Contains(tok, "*") || reFlag.MatchString(text[:ix[0]]) {
				continue // not a file name, a pattern, or a flag's argument
			}
			// A bare name in a Go comment is a file of its package (or its
			// testdata) or at the root; elsewhere the comment must say
			// where. A document names files of the part it describes:
			// any file of that name will do.
			if c.exists(path.Join(dir, tok)) || c.exists(path.Join(dir, "testdata", tok)) || c.exists(tok) || c.m.literal[tok] {
				continue
			}
			if !goComment && len(c.m.base[tok]) > 0 {
				continue
			}
			if len(c.m.base[tok]) > 0 {
				c.report(file, line, tok, "no file of this name in "+orRoot(dir)+": write its path"+c.baseHint(tok))
			} else {
				c.report(file, line, tok, "no file of this name in the repository")
			}
			continue
		}
		inDir := dir != "." && c.exists(path.Join(dir, els[0]))
		if cl := path.Clean(path.Join(dir, tok)); cl == ".." || strings.HasPrefix(cl, "../") {
			continue // outside the repository (a benchmark command's binary)
		}
		if !c.m.topDirs[els[0]] && !inDir && els[0] != ".." {
			continue // not a path of this repository (runtime/proc.go)
		}
		if !inDir && allTop(c.m.topDirs, els) {
			continue // a list of alternatives: cpu/cuda/hip
		}
		check := c.exists
		if strings.Contains(tok, "*") {
			check = c.glob
		}
		if check(path.Join(dir, tok)) || check(tok) {
			continue
		}
		c.report(file, line, tok, "no such file or directory"+c.baseHint(els[len(els)-1]))
	}
}

func allTop(top map[string]bool, els []string) bool {
	for _, e := range els {
		if !top[e] {
			return false
		}
	}
	return true
}

// baseHint names where files called base are, if anywhere.
func (c *checker) baseHint(base string) string {
	at := c.m.base[base]
	if len(at) == 0 || strings.Contains(base, "*") {
		return ""
	}
	if len(at) > 3 {
		at = append(at[:3:3], "...")
	}
	return " (a file of that name is at " + strings.Join(at, ", ") + ")"
}

// importPaths checks the module's import paths named in text. The
// module's own path with a version (go get MODULE@latest) names the
// module, not a package.
func (c *checker) importPaths(file string, line int, text string) {
	if c.reImport == nil {
		c.reImport = regexp.MustCompile(regexp.QuoteMeta(c.m.path) + `((?:/[A-Za-z0-9_\-]+)*)(@?)`)
	}
	for _, sm := range c.reImport.FindAllStringSubmatch(text, -1) {
		dir := strings.TrimPrefix(sm[1], "/")
		if dir == "" && sm[2] == "@" {
			continue
		}
		if _, ok := c.m.byDir[dir]; !ok {
			c.report(file, line, sm[0], "no package of this module at "+orRoot(dir))
		}
	}
}

func orRoot(dir string) string {
	if dir == "" {
		return "the root"
	}
	return dir
}

// qualified checks pkg.Name, pkg.Type.Member and (*pkg.Type).Member where
// pkg is the name of a package of this module and not foreign(pkg).
func (c *checker) qualified(file string, line int, text string, foreign func(string) bool) {
	type ref struct{ q, name, member string }
	var refs []ref
	for _, sm := range reMethodExpr.FindAllStringSubmatch(text, -1) {
		refs = append(refs, ref{sm[1], sm[2], sm[3]})
	}
	for _, sm := range reQualified.FindAllStringSubmatch(text, -1) {
		refs = append(refs, ref{sm[1], sm[2], sm[3]})
	}
	for _, r := range refs {
		ps := c.m.byName[r.q]
		if len(ps) == 0 || foreign(r.q) {
			continue
		}
		written := r.q + "." + r.name
		if r.member != "" {
			written += "." + r.member
		}
		var declaring []*pkg
		for _, p := range ps {
			if _, ok := p.top[r.name]; ok {
				declaring = append(declaring, p)
			}
		}
		if len(declaring) == 0 {
			c.report(file, line, written, c.noTop(ps, r.q, r.name))
			continue
		}
		if r.member == "" {
			continue
		}
		ok, isType := false, false
		for _, p := range declaring {
			if _, t := p.types[r.name]; t {
				isType = true
				ok = ok || c.m.hasMember(p, r.name, r.member, 0)
			}
		}
		if isType && !ok {
			c.report(file, line, written, c.noMember(declaring[0], r.name, r.member))
		}
	}
}

// noTop says that no package called q declares name, and where a
// same-named or similar declaration is.
func (c *checker) noTop(ps []*pkg, q, name string) string {
	var dirs []string
	for _, p := range ps {
		dirs = append(dirs, orRoot(p.dir))
	}
	msg := fmt.Sprintf("package %s (%s) declares no %s", q, strings.Join(dirs, ", "), name)
	var elsewhere, members []string
	for _, p := range c.sortedPkgs() {
		if _, ok := p.top[name]; ok && p.name != q {
			elsewhere = append(elsewhere, fmt.Sprintf("%s.%s (%s)", p.name, name, orRoot(p.dir)))
		}
		for _, tn := range sortedKeys(p.types) {
			if _, ok := p.types[tn].members[name]; ok && ast.IsExported(tn) {
				members = append(members, fmt.Sprintf("%s.%s.%s", p.name, tn, name))
			}
		}
	}
	if len(members) > 4 {
		members = append(members[:4:4], "...")
	}
	elsewhere = append(elsewhere, members...)
	if len(elsewhere) > 0 {
		msg += "; declared as " + strings.Join(elsewhere, ", ")
	}
	var similar []string
	for _, p := range ps {
		for n, d := range p.top {
			if d.nonTest && n != name && ast.IsExported(n) && similarName(n, name) {
				similar = append(similar, q+"."+n)
			}
		}
	}
	if len(similar) > 0 {
		sort.Strings(similar)
		if len(similar) > 4 {
			similar = append(similar[:4:4], "...")
		}
		msg += "; similar: " + strings.Join(similar, ", ")
	}
	return msg
}

// noMember says that type tn of p has no member mn, and which types of the
// module have one.
func (c *checker) noMember(p *pkg, tn, mn string) string {
	msg := fmt.Sprintf("type %s.%s (%s) has no field or method %s", p.name, tn, orRoot(p.dir), mn)
	var elsewhere []string
	for _, q := range c.sortedPkgs() {
		for _, n := range sortedKeys(q.types) {
			if (q != p || n != tn) && ast.IsExported(n) {
				if _, ok := q.types[n].members[mn]; ok {
					elsewhere = append(elsewhere, fmt.Sprintf("%s.%s.%s", q.name, n, mn))
				}
			}
		}
		if _, ok := q.top[mn]; ok && q != p {
			elsewhere = append(elsewhere, fmt.Sprintf("%s.%s", q.name, mn))
		}
	}
	if len(elsewhere) > 4 {
		elsewhere = append(elsewhere[:4:4], "...")
	}
	if len(elsewhere) > 0 {
		msg += "; declared as " + strings.Join(elsewhere, ", ")
	}
	var similar []string
	for n, d := range p.types[tn].members {
		if d.nonTest && n != mn && ast.IsExported(n) && similarName(n, mn) {
			similar = append(similar, tn+"."+n)
		}
	}
	if len(similar) > 0 {
		sort.Strings(similar)
		msg += "; similar: " + strings.Join(similar, ", ")
	}
	return msg
}

// similarName: one name begins or ends with the other (Open, OpenString;
// Copy, CopyLocal).
func similarName(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) || strings.HasSuffix(a, b) || strings.HasSuffix(b, a)
}

func (c *checker) sortedPkgs() []*pkg {
	ps := make([]*pkg, 0, len(c.m.byDir))
	for _, p := range c.m.byDir {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].dir < ps[j].dir })
	return ps
}

func sortedKeys(m map[string]*typ) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
