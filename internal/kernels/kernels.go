// Package kernels is capalloc's device code: collectives.cu (with
// compat.h), one CUDA/HIP C++ source for the symmetric heap's collectives,
// its point-to-point put and signals, and the examples' elementwise
// kernel; and the Go mirror of its parameter structs and signal pad.
//
// CUDA loads collectives.ptx, generated from the source by NVRTC for
// compute_70 (go generate; .ci/run regenerates it and fails on a diff) and
// embedded here, so users need no CUDA toolkit. HIP compiles Source with
// hiprtc for the device at first use. The test fakes compile the same
// source for the host, a model of a GPU (compat.h: every block a worker
// thread, its threads fibers, every memory access checked).
package kernels

import (
	_ "embed"
	"slices"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
)

//go:embed collectives.cu
var source string

//go:embed compat.h
var compat string

// Kernel names (extern "C" in the source).
const (
	Barrier          = "capalloc_barrier"
	AllReduceOneShot = "capalloc_allreduce_oneshot"
	AllReduceTwoShot = "capalloc_allreduce_twoshot"
	AllGather        = "capalloc_allgather"
	AllToAll         = "capalloc_alltoall"
	ReduceScatter    = "capalloc_reducescatter"
	Put              = "capalloc_put"
	Signal           = "capalloc_signal"
	WaitSignal       = "capalloc_wait_signal"
	Axpy             = "capalloc_axpy"

	// The aligned variants: the same collectives where every operand
	// (and every chunk) is 16-aligned, moved as 16-byte vectors only,
	// several in flight per thread. A misaligned operand faults in them.
	AllReduceOneShotAligned = "capalloc_allreduce_oneshot_aligned"
	AllReduceTwoShotAligned = "capalloc_allreduce_twoshot_aligned"
	AllGatherAligned        = "capalloc_allgather_aligned"
	AllToAllAligned         = "capalloc_alltoall_aligned"
	ReduceScatterAligned    = "capalloc_reducescatter_aligned"
)

// Names is every kernel of the module.
var Names = []string{Barrier, AllReduceOneShot, AllReduceTwoShot, AllGather, AllToAll, ReduceScatter, Put, Signal, WaitSignal, Axpy,
	AllReduceOneShotAligned, AllReduceTwoShotAligned, AllGatherAligned, AllToAllAligned, ReduceScatterAligned, AllToAllV}

// Aligned is every aligned variant.
var Aligned = []string{AllReduceOneShotAligned, AllReduceTwoShotAligned, AllGatherAligned, AllToAllAligned, ReduceScatterAligned}

// IsAligned says whether kernel name is an aligned variant.
func IsAligned(name string) bool { return slices.Contains(Aligned, name) }

// What a thread of an aligned variant moves per round (the source's
// CA_UNROLL and CA_RUNROLL): copies AlignedCopyPacks 16-byte packs,
// sums AlignedSumPacks (each loaded from two ranks at once). The host
// sizes their grids by it.
const (
	AlignedCopyPacks = 4
	AlignedSumPacks  = 1
)

// AlignedMaxPacks bounds the 16-byte packs per rank an aligned variant
// serves (32 GiB): it counts them in 32 bits, with room for a round past
// the end.
const AlignedMaxPacks = 1 << 31

// Source is collectives.cu with compat.h in place of its #include, so a
// runtime compiler needs no include path.
func Source() string {
	return strings.Replace(source, `#include "compat.h"`, compat, 1)
}

// Image is the module for a driver's LoadModule: the PTX for cuda, the
// source for hip.
func Image() driver.ModuleImage {
	return driver.ModuleImage{Name: "capalloc collectives", PTX: ptx(), Source: Source(), Kernels: Names}
}
