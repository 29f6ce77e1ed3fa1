package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The test binary is also the stage process of TestProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(envStage) != "" {
		if err := stageProcess(os.Stdout); err != nil {
			os.Stderr.WriteString("pipeline stage: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestGoroutines(t *testing.T) {
	var out bytes.Buffer
	if err := runGoroutines(&out, 30); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "30 steps replayed, every output checked") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(&out, 30); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "as processes on cpu, 30 steps replayed") {
		t.Fatalf("output: %s", out.String())
	}
}
