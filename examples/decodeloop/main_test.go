package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/fakes"
)

// The example must run clean: no allocation in the capture, fresh inputs at
// every replay, nothing leaked at Close.
func TestDecodeLoopRuns(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "cpu", 50, 0))
	require.Contains(t, out.String(), "0 allocations inside the capture")
	require.Contains(t, out.String(), "graph replay")
}

// -kernels needs a driver that runs device code: on cpu it is refused with
// the reason, before anything is captured.
func TestDecodeLoopKernelsNeedADevice(t *testing.T) {
	var out bytes.Buffer
	err := run(&out, "cpu", 5, 10)
	require.ErrorContains(t, err, "runs no device code")
}

// With -kernels, over the fake CUDA runtime (where the library's kernels
// run compiled for the host): every step, eager and replayed, checks y[0].
func TestDecodeLoopKernelsOnCUDAFake(t *testing.T) {
	fakes.CUDA.Lib(t)
	var out bytes.Buffer
	require.NoError(t, run(&out, "cuda", 3, 4))
	require.Contains(t, out.String(), "3 steps of 4 axpy kernels on cuda")
}
