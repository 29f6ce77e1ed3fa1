package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The example must run clean: no allocation in the capture, fresh inputs at
// every replay, nothing leaked at Close.
func TestDecodeLoopRuns(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "cpu", 50))
	require.Contains(t, out.String(), "0 allocations inside the capture")
	require.Contains(t, out.String(), "graph replay")
}
