package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAgainstListsChangedVerdicts: -against names every case whose verdict
// differs from the recorded H100 table, and only those.
func TestAgainstListsChangedVerdicts(t *testing.T) {
	rows := []Row{
		{Case: "global/same/nonblocking/malloc", CUDA: verdictInvalidates},       // as recorded
		{Case: "global/same/nonblocking/mem_get_info", CUDA: verdictInvalidates}, // recorded ok
		{Case: "global/same/nonblocking/device_sync", CUDA: verdictSkipped},      // not compared
		{Case: "global/same/nonblocking/free", CUDA: verdictNotRun},              // not compared: -budget spent
		{Case: "no/such/nonblocking/case", CUDA: verdictOK},                      // not in the table
	}
	var out bytes.Buffer
	require.NoError(t, against(filepath.Join("testdata", "h100-driver580-cuda13.0.json"), rows, &out))
	var changed []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "changed: ") {
			changed = append(changed, l)
		}
	}
	assert.Equal(t, []string{"changed: global/same/nonblocking/mem_get_info: recorded ok (NVIDIA H100 80GB HBM3), now refused+invalidated"}, changed)
	assert.Contains(t, out.String(), "2 case(s) compared, 1 verdict(s) changed")
	require.Error(t, against(filepath.Join("testdata", "missing.json"), rows, &out))
}
