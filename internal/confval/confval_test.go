package confval

import (
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	known := []string{"cpu", "cuda", "hip", "plugin", "expandable_segments", "watchdog"}
	for name, want := range map[string]string{
		"cdua": "cuda", "CPU": "cpu", "Cuda": "cuda", "cpy": "cpu", "hpi": "hip", "plugn": "plugin",
		"expandable_segment": "expandable_segments", "watchdgo": "watchdog", "Watchdog": "watchdog",
		"xla": "", "rocm": "", "": "", "metal": "", "cudacuda": "", "c": "",
	} {
		if got := Suggest(name, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"cuda", "cuda", 0}, {"cdua", "cuda", 1},
		{"cuda", "cpu", 3}, {"kitten", "sitting", 3}, {"ca", "abc", 3}, {"plugn", "plugin", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
		if got := editDistance(tc.b, tc.a); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.d)
		}
	}
}

// BoolForms names every form Bool reads, so an error refusing a value
// lists what would have been accepted.
func TestBoolFormsNamesWhatBoolReads(t *testing.T) {
	for _, form := range []string{"true", "false", "1", "0", "t", "f", "yes", "no", "on", "off"} {
		if _, ok := Bool(form); !ok {
			t.Errorf("Bool(%q) refused", form)
		}
		if _, ok := Bool(strings.ToUpper(form)); !ok {
			t.Errorf("Bool(%q) refused: any case", strings.ToUpper(form))
		}
		if !strings.Contains(BoolForms, form+"|") && !strings.Contains(BoolForms, "|"+form) {
			t.Errorf("BoolForms %q does not name %q", BoolForms, form)
		}
	}
}
