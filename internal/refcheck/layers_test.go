package refcheck

import (
	"strings"
	"testing"
)

const layersDoc = "# design\n\n| layer | packages | may import |\n|---|---|---|\n" +
	"| low | `low` | nothing of the module |\n" +
	"| mid | `mid`, `mid/...` | low |\n" +
	"| top | `cmd/...`, `gone` | every layer |\n\nafter the table\n"

// CheckLayers reports an import up a layer (and one sideways into a
// layer not listed), a package in no layer and an entry that names no
// package; a test file's upward import and an import of the own layer
// are fine.
func TestCheckLayersFindsUpwardImports(t *testing.T) {
	root := tree(t, map[string]string{
		"go.mod":              "module example.com/m\n\ngo 1.25\n",
		"docs/design.md":      layersDoc,
		"low/low.go":          "package low\n\nimport _ \"example.com/m/mid\"\n",
		"low/low_test.go":     "package low\n\nimport _ \"example.com/m/cmd/tool\"\n",
		"mid/mid.go":          "package mid\n\nimport (\n\t_ \"example.com/m/low\"\n\t_ \"example.com/m/mid/sub\"\n)\n",
		"mid/sub/sub.go":      "package sub\n",
		"cmd/tool/main.go":    "package main\n\nimport _ \"example.com/m/mid\"\n\nfunc main() {}\n",
		"stray/stray.go":      "package stray\n",
		"stray/stray_test.go": "package stray\n",
	})
	problems, err := CheckLayers(root)
	if err != nil {
		t.Fatal(err)
	}
	got := problemStrings(problems)
	want := []string{
		"docs/design.md:3: stray: package is in no layer",
		"docs/design.md:7: gone: names no package of the module",
		"low/low.go:3: example.com/m/mid: layer low (docs/design.md:5) may not import layer mid",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: got %q, want it to start %q", i, got[i], want[i])
		}
	}
}

func TestParseLayersRefusesWhatItCannotRead(t *testing.T) {
	for name, doc := range map[string]string{
		"no table":      "# design\n",
		"unknown layer": "| layer | packages | may import |\n|---|---|---|\n| a | `a` | b |\n",
		"twice":         "| layer | packages | may import |\n|---|---|---|\n| a | `a` | nothing of the module |\n| a | `b` | nothing of the module |\n",
		"no packages":   "| layer | packages | may import |\n|---|---|---|\n| a |  | nothing of the module |\n",
		"two cells":     "| layer | packages | may import |\n|---|---|---|\n| a | `a` |\n",
	} {
		if _, err := ParseLayers(doc); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	layers, err := ParseLayers(layersDoc)
	if err != nil {
		t.Fatal(err)
	}
	if top := layers[2]; strings.Join(top.MayUse, ",") != "low,mid" {
		t.Errorf("every layer: top may import %v, want low and mid", top.MayUse)
	}
}
