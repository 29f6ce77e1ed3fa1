// Package symheap is a symmetric heap for N ranks with collectives that
// stay capturable: barrier, all-reduce (sum of float32 or int32),
// all-gather, reduce-scatter, all-to-all and AllToAllV (per-peer counts
// in heap memory, read when it runs: one graph serves every routing of a
// mixture-of-experts step; bad counts are ErrCountsOutOfRange on every
// rank, not a fault, and leave the heap usable), each put on a rank's
// allocator stream as a host function (driver.HostFuncLauncher), so a
// capture records it with the rest of the step and every replay runs it
// again on fresh data.
//
// The design follows what NVSHMEM, PyTorch's SymmetricMemory and NCCL's
// windows converge on (docs/symmetric-heap.md):
//
//   - Every rank reserves one heap of the same size. The handles (here
//     memfd file descriptors) are exchanged once, when the Group is made;
//     each rank maps every peer's heap itself at Open, before any capture,
//     so peers sit at different addresses in each rank and code must pass
//     offsets (Tensor), never pointers.
//   - Allocation in the heap is a deterministic bump (the same sequence
//     gives the same offsets on every rank): host arithmetic, legal in a
//     capture, no driver call, no exchange. Freeing is a whole-heap Reset
//     outside capture. With Options.CheckAllocs, each rank's allocation
//     sequence is hashed and compared at the next barrier.
//   - Each heap has a signal pad. Barriers use monotonically increasing
//     epochs kept in the pad (a release store on arrival, acquire loads on
//     the way out, a wrap-safe compare), never set/clear flags and never a
//     value frozen into a graph. A wait spins briefly, then sleeps on a
//     futex, and gives up after Options.Timeout with ErrCollectiveTimeout.
//   - Every collective ends with a barrier, so a fast rank never
//     overwrites inputs a slow rank still reads.
//
// Ranks must launch the same collectives, and replay the same graphs, the
// same number of times: a rank that replays fewer times makes its peers
// fail with ErrCollectiveTimeout (reported by their next Synchronize), not
// hang.
//
// Group and Heap serve backends whose device memory is host memory
// (cpu): ranks are goroutines of one process, or processes that received
// the group's files (Group.Files, Attach).
//
// For CUDA and HIP, OpenDevice makes a DeviceHeap in device memory: each
// rank's heap exported as an IPC handle (driver.IPCMemory), the handles
// exchanged through an Exchange (NewLocalExchange for goroutine ranks,
// FileExchange for processes), every peer opened, the peer table written
// to the device once, all or nothing (ErrPeerOpen, ErrExchangeTimeout).
// Its memory is never touched after its rank released it: Close marks
// every pad closed, so later collectives and replays stop before touching
// any heap (ErrPeerClosed on the survivors), ranks of one process share
// the memory's lifetime, and memory another process maps is never freed
// (docs/symmetric-heap.md, "Lifetime").
// Its allocation is the same bump; its collectives are kernels of this
// library (internal/kernels: one CUDA/HIP source) that read the table and
// keep their epochs in the pads, with bounded waits that report through an
// error word in the pad (docs/device-collectives.md). The all-gather and
// all-to-all also have a copy-engine variant (AllGatherWith and
// AllToAllWith with CopyEngine): one driver copy per rank between barrier
// kernels, recorded by a capture as memcpy nodes; Auto picks it only
// where a recorded GPU run measured it faster (copyengine.go). NCCL/RCCL
// (package nccl) serve ranks across machines.
//
// Both heaps also put and signal point to point (Put, Signal,
// WaitSignal: host functions on Heap, kernels on DeviceHeap), capturable,
// with signal counts kept in the pads at run time so a captured hand-off
// replays without reset, and waits bounded by the same timeout.
//
// Heap and DeviceHeap implement Collectives, one interface for engine
// code on every backend.
package symheap
