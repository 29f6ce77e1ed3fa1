package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The producer in Pre: warm-up, one capture, replays; every step checked.
func TestStepExecRuns(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "cpu", 20, false))
	require.Contains(t, out.String(), "20 steps on cpu: mode captured, 2 warm-up, 1 capture(s) tried, 18 replays, 0 eager")
	require.NotContains(t, out.String(), "fell back")
}

// The producer in the captured region: the capture is refused (a pageable
// copy), the step falls back to eager, and every step is still right.
func TestStepExecMisplacedFallsBack(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "cpu", 20, true))
	require.Contains(t, out.String(), "20 steps on cpu: mode eager, 2 warm-up, 1 capture(s) tried, 0 replays, 18 eager")
	require.Contains(t, out.String(), "operation is incompatible with stream capture")
}
