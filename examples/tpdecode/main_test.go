package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The test binary is also the rank process of TestProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(envRank) != "" {
		exitIf(rankProcess(os.Stdout))
	}
	os.Exit(m.Run())
}

func TestGoroutines(t *testing.T) {
	var out bytes.Buffer
	if err := runGoroutines(&out, "cpu", 3, 20); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "every result checked") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(&out, "cpu", 3, 20); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "rank "); got != 3 {
		t.Fatalf("%d ranks reported, want 3: %s", got, out.String())
	}
}
