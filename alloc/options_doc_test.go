package alloc

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ParseOptions' documentation lists every key of optionKeys, the table
// the parser reads, in its order (sorted by name): a key added to the
// table without its line (or the reverse) fails here.
func TestParseOptionsDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("options_parse.go")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, _ := strings.Cut(string(b), "// ParseOptions reads allocator options")
	doc, _, _ = strings.Cut(doc, "\nfunc ParseOptions(")
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^//\t([a-z_]+) +\S`).FindAllStringSubmatch(doc, -1) {
		documented = append(documented, m[1])
	}
	var keys []string
	for _, k := range optionKeys {
		keys = append(keys, k.name)
	}
	if !slices.Equal(documented, keys) {
		t.Errorf("ParseOptions documents the keys %v; optionKeys holds %v", documented, keys)
	}
}
