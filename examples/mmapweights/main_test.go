//go:build linux

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/fakes"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// On cpu MapHost registers the mapping and a captured UploadHost copies
// it; on cpu:profile=gb10 (pageable access) it is read in place. Either
// way every replay's output is the file's bytes as rewritten through the
// mapping before it (a stale read fails the run).
func TestMmapWeightsOnCPU(t *testing.T) {
	for backend, how := range map[string]string{
		"cpu":              "registered (no pageable memory access), copied by a captured UploadHost",
		"cpu:profile=gb10": "in place (through the host's page tables: no registration, no copy), read by a captured host function",
	} {
		t.Run(backend, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(&out, backend, 3, 4096))
			require.Contains(t, out.String(), "16384 B of weights mapped on cpu: "+how)
			require.Contains(t, out.String(), "4 replays of one captured step, outputs checked against the file")
		})
	}
}

// Over the fake runtimes: registered where the fake device has no pageable
// access, and where it has HMM's (FAKE_<RT>_PAGEABLE_ACCESS=1,
// FAKE_<RT>_HOST_PAGE_TABLES=0); with access through the host's page
// tables (both 1) the library's axpy kernel, compiled for the host, reads
// the unregistered mapping at its device address (the fakes fault a
// kernel that touches unregistered host memory on a device without
// pageable access).
func TestMmapWeightsOnFakes(t *testing.T) {
	for _, f := range []struct {
		backend, env string
		fake         *gpurttest.Fake
	}{
		{"cuda", "FAKE_CUDA_", fakes.CUDA},
		{"hip", "FAKE_HIP_", fakes.HIP},
	} {
		t.Run(f.backend, func(t *testing.T) {
			f.fake.Lib(t)
			var out bytes.Buffer
			require.NoError(t, run(&out, f.backend, 2, 4096))
			require.Contains(t, out.String(), "registered (no pageable memory access)")
			t.Setenv(f.env+"PAGEABLE_ACCESS", "1")
			t.Setenv(f.env+"HOST_PAGE_TABLES", "0")
			out.Reset()
			require.NoError(t, run(&out, f.backend, 2, 4096))
			require.Contains(t, out.String(), "registered (pageable memory access without the host's page tables: HMM could migrate it)")
			t.Setenv(f.env+"HOST_PAGE_TABLES", "1")
			out.Reset()
			require.NoError(t, run(&out, f.backend, 2, 4096))
			require.Contains(t, out.String(), "in place (through the host's page tables: no registration, no copy), read by a captured kernel at DevicePtr")
		})
	}
}

func TestMmapWeightsBadInput(t *testing.T) {
	require.ErrorContains(t, run(&bytes.Buffer{}, "cpu", 1, 0), "want a positive count")
}
