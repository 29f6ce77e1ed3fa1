package conformance

import (
	"fmt"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// A group reads as its table of rules: each row is a subtest whose name is
// the rule's stable name (what -run patterns, the fakes' group lists and
// the guides cite) and whose check, a function named after what it holds,
// proves it on a fresh driver. No function of the package runs over 80
// lines (TestNoFunctionOver80Lines), so every check fits a screen.

// rule is one row of a group's table.
type rule struct {
	name  string
	check func(t *testing.T)
}

// runRules runs each rule, in order, as a subtest of t.
func runRules(t *testing.T, rules ...rule) {
	for _, r := range rules {
		t.Run(r.name, r.check)
	}
}

// inEachMode makes a check that runs check once per capture mode, each a
// subtest named after the mode.
func inEachMode(check func(t *testing.T, mode alloc.CaptureMode)) func(t *testing.T) {
	return func(t *testing.T) {
		for _, mode := range driver.Modes() {
			t.Run(mode.String(), func(t *testing.T) { check(t, mode) })
		}
	}
}

// launchedOrNot makes a check that runs check on a graph never launched
// and on one launched, as the subtests "unlaunched" and "launched".
func launchedOrNot(check func(t *testing.T, launched bool)) func(t *testing.T) {
	return func(t *testing.T) {
		t.Run("unlaunched", func(t *testing.T) { check(t, false) })
		t.Run("launched", func(t *testing.T) { check(t, true) })
	}
}

// forBoth makes a check that runs check with false and with true, as the
// subtests "key=false" and "key=true".
func forBoth(key string, check func(t *testing.T, v bool)) func(t *testing.T) {
	return func(t *testing.T) {
		for _, v := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s=%v", key, v), func(t *testing.T) { check(t, v) })
		}
	}
}
