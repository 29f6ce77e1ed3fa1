package cliargs

import (
	"flag"
	"strings"
	"testing"
)

func TestParseOne(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		operand string
		ok      bool
		usage   bool // the usage line and the defaults were printed
	}{
		{"one operand", []string{"-n", "3", "in.json"}, "in.json", true, false},
		{"none", []string{"-n", "3"}, "", false, true},
		{"two", []string{"a.json", "b.json"}, "", false, true},
		{"bad flag", []string{"-x", "a.json"}, "", false, true},
		{"help", []string{"-h"}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
			fs.SetOutput(&out)
			n := fs.Int("n", 1, "how many")
			operand, ok := ParseOne(fs, tc.args, "usage: cmd [-n N] FILE")
			if operand != tc.operand || ok != tc.ok {
				t.Fatalf("ParseOne = %q, %v; want %q, %v", operand, ok, tc.operand, tc.ok)
			}
			if ok && *n != 3 {
				t.Errorf("-n parsed as %d", *n)
			}
			printed := strings.Contains(out.String(), "usage: cmd [-n N] FILE\n") && strings.Contains(out.String(), "how many")
			if printed != tc.usage {
				t.Errorf("usage printed %v, want %v; output:\n%s", printed, tc.usage, out.String())
			}
		})
	}
}
