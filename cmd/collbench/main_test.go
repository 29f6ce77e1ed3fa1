package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/fakes"
	"github.com/capalloc/capalloc/symheap"
)

// The kit's matrix: all-reduce one- and two-shot at six sizes, the
// other collectives (AllToAllV too) at four, through the heap's dispatch;
// every collective but AllToAllV (one kernel) again through the general
// kernels at three sizes; the all-gather and all-to-all by the copy
// engines at the kernel rows' four.
func TestCases(t *testing.T) {
	var names []string
	variants := map[string]int{}
	for _, c := range cases(false) {
		names = append(names, c.String())
		variants[c.Variant]++
	}
	assert.Len(t, names, 51)
	assert.Equal(t, map[string]int{"": 28, general: 15, copyVariant: 8}, variants)
	for _, want := range []string{"allreduce/oneshot/1KiB", "allreduce/twoshot/256MiB", "allgather/64MiB", "reducescatter/1KiB", "alltoall/64MiB",
		"alltoallv/1KiB", "alltoallv/1MiB", "alltoallv/64MiB", "alltoallv/256MiB",
		"allgather/1MiB", "allgather/256MiB", "reducescatter/1MiB", "reducescatter/256MiB", "alltoall/1MiB", "alltoall/256MiB",
		"allreduce/oneshot/1MiB/general", "allreduce/twoshot/64MiB/general", "allgather/1KiB/general", "reducescatter/64MiB/general", "alltoall/1MiB/general",
		"allgather/1KiB/copy", "allgather/256MiB/copy", "alltoall/1MiB/copy", "alltoall/64MiB/copy"} {
		assert.Contains(t, names, want)
	}
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "%s twice: -only and the report tell rows by name", n)
		seen[n] = true
	}
}

// The tensors' sizes meet each collective's rule (symheap/devcollectives.go)
// and the traffic and bus bandwidth follow their definitions.
func TestSizesAndBandwidth(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		in, out := sizes(Case{Op: "allgather", Bytes: 64 << 20}, n)
		assert.Equal(t, out, int64(n)*in)
		in, out = sizes(Case{Op: "reducescatter", Bytes: 1 << 10}, n)
		assert.Equal(t, in, int64(n)*out)
		in, out = sizes(Case{Op: "alltoall", Bytes: 1 << 10}, n)
		assert.Equal(t, in, out)
		assert.Zero(t, in%(int64(n)*16))
	}
	// 4 ranks, 1 GB one-shot: each rank reads 4 GB and writes 1 GB.
	assert.Equal(t, 4*5e9, traffic(Case{Op: "allreduce", Alg: "oneshot", Bytes: 1e9}, 4))
	// NCCL: all-reduce busbw = S/t · 2(n-1)/n.
	assert.InDelta(t, 1.5e9, busBW(Case{Op: "allreduce", Bytes: 1e9}, 4, time.Second), 1)
	assert.InDelta(t, 0.75e9, busBW(Case{Op: "allgather", Bytes: 1e9}, 4, time.Second), 1)
	// all-to-all: S is each rank's input, NCCL's the total; uniform
	// AllToAllV moves what AllToAll does.
	assert.Equal(t, busBW(Case{Op: "alltoall", Bytes: 1e9}, 4, time.Second), busBW(Case{Op: "alltoallv", Bytes: 1e9}, 4, time.Second))
	assert.Equal(t, traffic(Case{Op: "alltoall", Bytes: 1e9}, 4), traffic(Case{Op: "alltoallv", Bytes: 1e9}, 4))
}

// Over the fake runtime (the kernels' host build): every row runs, is
// captured and replayed, and its figures are written.
func TestOverFakeRuntime(t *testing.T) {
	fakes.CUDA.Lib(t) // skips without gcc and g++
	out := filepath.Join(t.TempDir(), "c.json")
	var stdout, stderr bytes.Buffer
	rc := run([]string{"-backend=cuda", "-small", "-ranks=2", "-only=1KiB", "-json", out}, &stdout, &stderr)
	require.Equal(t, 0, rc, "stderr: %s", stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(b, &rep))
	// one-shot, two-shot, all-gather, reduce-scatter, all-to-all at 1 KiB,
	// through the dispatch and through the general kernels; all-gather and
	// all-to-all by the copy engines; AllToAllV
	assert.Len(t, rep.Rows, 13)
	assert.Positive(t, rep.CopyGBps)
	assert.Positive(t, rep.EmptyNs[2])
	variants := map[string]int{}
	for _, r := range rep.Rows {
		variants[r.Variant]++
		assert.Equal(t, r.Variant == general, strings.HasSuffix(r.Case, "/general"), r.Case)
		assert.Empty(t, r.Err, r.Case)
		assert.Equal(t, 3, r.Replays, r.Case)
		assert.Positive(t, r.CapturedNs, r.Case)
		assert.Positive(t, r.OverEmpty, r.Case)
	}
	assert.Equal(t, map[string]int{"": 6, general: 5, copyVariant: 2}, variants)
	assert.Contains(t, stdout.String(), "allreduce/twoshot/1KiB")
	assert.Contains(t, stdout.String(), "alltoallv/1KiB")
	assert.Contains(t, stdout.String(), "alltoall/1KiB/general")
	assert.Contains(t, stdout.String(), "allgather/1KiB/copy")

	var info bytes.Buffer
	require.Equal(t, 0, run([]string{"-backend=cuda", "-info"}, &info, &stderr), stderr.String())
	assert.Contains(t, info.String(), `"device_heap": true`)
	assert.Equal(t, 2, run([]string{"-ranks=0"}, &info, &stderr))
}

// -peers prints which of N devices can reach which, as the runtime says
// (the fake's FAKE_CUDA_NO_P2P pairs cannot), for the GPU kit's P2P matrix.
func TestPeersMatrix(t *testing.T) {
	fakes.CUDA.Lib(t) // skips without gcc and g++
	t.Setenv("FAKE_CUDA_DEVICES", "3")
	t.Setenv("FAKE_CUDA_NO_P2P", "0-2")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-backend=cuda", "-peers", "3"}, &stdout, &stderr), stderr.String())
	var got struct {
		Devices int      `json:"devices"`
		Matrix  [][]bool `json:"can_access_peer"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String())
	assert.Equal(t, 3, got.Devices)
	assert.Equal(t, [][]bool{{true, true, false}, {true, true, true}, {false, true, true}}, got.Matrix)
	assert.Equal(t, 2, run([]string{"-backend=cuda", "-peers", "-1"}, &stdout, &stderr))
}

// The rows' operands decide the kernels the heap launches
// (symheap/devcollectives.go: the aligned ones only when every offset is
// 16-aligned): a general row's are all off 16-alignment, the others' all
// on it, and both have the case's sizes.
func TestOperandsPickTheVariant(t *testing.T) {
	fakes.CUDA.Lib(t) // skips without gcc and g++
	b := &bench{backend: "cuda", small: true}
	w, _, err := b.open(2, 1<<20)
	require.NoError(t, err)
	defer w.close()
	for _, c := range cases(true) {
		require.NoError(t, w.each(func(r int) error { return w.heaps[r].Reset() }))
		ins, outs, err := operands(w, c)
		require.NoError(t, err, c.String())
		in, out := sizes(c, 2)
		for r := range 2 {
			ts := []symheap.Tensor{ins[r]}
			assert.Equal(t, in, ins[r].Size, c.String())
			if out > 0 {
				ts = append(ts, outs[r])
				assert.Equal(t, out, outs[r].Size, c.String())
			}
			for _, tn := range ts {
				assert.Equal(t, c.Variant == general, tn.Off%16 != 0, "%s: offset %d", c, tn.Off)
			}
		}
	}
}
