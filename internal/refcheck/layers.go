package refcheck

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// LayersDoc is the document whose table of layers CheckLayers enforces,
// and LayersTable the header row that starts the table.
const (
	LayersDoc   = "docs/design.md"
	LayersTable = "| layer | packages | may import |"
)

// Layer is one row of the layers table: a name, the packages in it
// (directories relative to the module root; "dir/..." is dir and every
// package under it) and the layers its packages may import besides their
// own.
type Layer struct {
	Name     string
	Packages []string
	MayUse   []string
	Line     int // in LayersDoc
}

// ParseLayers reads the layers table out of doc, the text of LayersDoc:
// the rows under the LayersTable header. A "may import" cell is a
// comma-separated list of layer names, "nothing of the module", or
// "every layer"; a packages cell lists paths in backquotes. A row that
// names an unknown layer, a layer twice or no packages is an error: the
// table is the rule, and a rule that cannot be read is not kept.
func ParseLayers(doc string) ([]Layer, error) {
	lines := strings.Split(doc, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == LayersTable })
	if start < 0 {
		return nil, fmt.Errorf("%s: no layers table (header %q)", LayersDoc, LayersTable)
	}
	var layers []Layer
	every := map[int]bool{}
	for i := start + 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
		cells := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("%s:%d: a layer row has 3 cells, not %d", LayersDoc, i+1, len(cells))
		}
		l := Layer{Name: strings.TrimSpace(cells[0]), Line: i + 1}
		for _, p := range strings.Split(cells[1], ",") {
			if p = strings.Trim(strings.TrimSpace(p), "`"); p != "" {
				l.Packages = append(l.Packages, p)
			}
		}
		switch uses := strings.TrimSpace(cells[2]); uses {
		case "nothing of the module":
		case "every layer":
			every[len(layers)] = true
		default:
			for _, u := range strings.Split(uses, ",") {
				l.MayUse = append(l.MayUse, strings.TrimSpace(u))
			}
		}
		if l.Name == "" || len(l.Packages) == 0 {
			return nil, fmt.Errorf("%s:%d: a layer row needs a name and packages", LayersDoc, i+1)
		}
		layers = append(layers, l)
	}
	names := map[string]bool{}
	for _, l := range layers {
		if names[l.Name] {
			return nil, fmt.Errorf("%s:%d: layer %q named twice", LayersDoc, l.Line, l.Name)
		}
		names[l.Name] = true
	}
	for i := range layers {
		if every[i] {
			for _, o := range layers {
				if o.Name != layers[i].Name {
					layers[i].MayUse = append(layers[i].MayUse, o.Name)
				}
			}
		}
		for _, u := range layers[i].MayUse {
			if !names[u] {
				return nil, fmt.Errorf("%s:%d: layer %q may import %q, which is not a layer of the table", LayersDoc, layers[i].Line, layers[i].Name, u)
			}
		}
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%s:%d: the layers table has no rows", LayersDoc, start+1)
	}
	return layers, nil
}

// layerOf is the layer whose packages cell names dir: its own entry, or
// else the one "prefix/..." entry over it. ok is false when none does, or
// when two entries claim it equally.
func layerOf(layers []Layer, dir string) (l *Layer, ok bool) {
	best, bestLen, ties := -1, -1, 0
	for i := range layers {
		for _, p := range layers[i].Packages {
			n := -1
			if p == dir {
				n = len(p) + 1 // an exact entry beats any pattern
			} else if prefix, isPattern := strings.CutSuffix(p, "/..."); isPattern && (dir == prefix || strings.HasPrefix(dir, prefix+"/")) {
				n = len(prefix)
			}
			switch {
			case n > bestLen:
				best, bestLen, ties = i, n, 0
			case n == bestLen && n >= 0 && i != best:
				ties++
			}
		}
	}
	if best < 0 || ties > 0 {
		return nil, false
	}
	return &layers[best], true
}

// CheckLayers checks the imports of the module rooted at root against the
// layers table of its LayersDoc: a package (its non-test files) may import
// the packages of its own layer and of the layers its row lists, nothing
// else of the module. Every package must be in exactly one layer, and
// every entry of the table must name a package (or, for "dir/...", hold
// one). Test files may import anything: a driver's tests run it under an
// allocator.
func CheckLayers(root string) ([]Problem, error) {
	doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(LayersDoc)))
	if err != nil {
		return nil, err
	}
	layers, err := ParseLayers(string(doc))
	if err != nil {
		return nil, err
	}
	header := 1 + slices.IndexFunc(strings.Split(string(doc), "\n"), func(l string) bool { return strings.TrimSpace(l) == LayersTable })
	files, modPath, err := nonTestImports(root)
	if err != nil {
		return nil, err
	}
	var problems []Problem
	report := func(file string, line int, ref, format string, args ...any) {
		problems = append(problems, Problem{File: file, Line: line, Ref: ref, Msg: fmt.Sprintf(format, args...)})
	}
	used := map[string]bool{} // table entries that matched a package
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[f.dir] = true
	}
	for dir := range dirs {
		l, ok := layerOf(layers, dir)
		if !ok {
			report(LayersDoc, header, orRoot(dir), "package is in no layer, or in two equally: add it to one row of the layers table")
			continue
		}
		for _, p := range l.Packages {
			if prefix, isPattern := strings.CutSuffix(p, "/..."); p == dir || isPattern && strings.HasPrefix(dir+"/", prefix+"/") {
				used[p] = true
			}
		}
	}
	for _, f := range files {
		from, ok := layerOf(layers, f.dir)
		if !ok {
			continue // reported above
		}
		for _, im := range f.imports {
			var to string
			if im.path == modPath {
				to = ""
			} else if rest, ours := strings.CutPrefix(im.path, modPath+"/"); ours {
				to = rest
			} else {
				continue
			}
			target, ok := layerOf(layers, to)
			if !ok || target.Name == from.Name || slices.Contains(from.MayUse, target.Name) {
				continue
			}
			report(f.rel, im.line, im.path, "layer %s (%s:%d) may not import layer %s: move the code down, or pass what it needs in from above",
				from.Name, LayersDoc, from.Line, target.Name)
		}
	}
	for _, l := range layers {
		for _, p := range l.Packages {
			if !used[p] {
				report(LayersDoc, l.Line, p, "names no package of the module: remove it from the layers table")
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

// importsOf is one non-test Go file's imports.
type importsOf struct {
	rel, dir string // slash paths relative to the root ("" for the root)
	imports  []importLine
}

// importLine is one import path and the line that imports it.
type importLine struct {
	path string
	line int
}

// nonTestImports reads the imports of every non-test Go file of the module
// at root (the directories loadModule reads), and the module's path.
func nonTestImports(root string) ([]importsOf, string, error) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, "", err
	}
	modPath := modulePath(gomod)
	fset := token.NewFileSet()
	var files []importsOf
	err = walkModuleFiles(root, func(rel string) error {
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(rel)), nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		if dir == "." {
			dir = ""
		}
		io := importsOf{rel: rel, dir: dir}
		for _, im := range f.Imports {
			io.imports = append(io.imports, importLine{strings.Trim(im.Path.Value, `"`), fset.Position(im.Pos()).Line})
		}
		files = append(files, io)
		return nil
	})
	return files, modPath, err
}
