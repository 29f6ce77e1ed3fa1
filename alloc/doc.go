// Package alloc is capalloc's capture-safe device memory allocator: one
// [Allocator] per stream over a vendor [driver.Driver] (cuda, hip, cpu, or
// any of them through backends/plugin), with the capture logic written
// once, here. This package is what an engine calls; package alloc/driver
// is what a backend implements.
//
// # States
//
// Every operation first asks the driver for its stream's capture status
// ([driver.Driver.StreamCaptureStatus]: the driver is the authority, not the
// allocator's own flag) and folds it into one of four [CaptureState]s:
//
//   - [StateNone]: no capture. Alloc takes from the pool, copies and memsets
//     run, Synchronize waits.
//   - [StateActive]: a capture this allocator began ([Allocator.BeginCapture],
//     [Allocator.WithCapture]). Alloc becomes a graph allocation owned by the
//     graph until [Graph.Close]; copies from pinned [HostBuffer]s and memsets
//     become nodes; pageable copies, synchronous allocation and synchronize
//     are refused, the capture staying valid.
//   - [StateExternal]: the driver reports a capture this allocator did not
//     begin. Every data operation is refused, with no driver call.
//   - [StateInvalidated]: the driver invalidated the capture. Everything is
//     refused with [ErrCaptureInvalidated] until [Allocator.EndCapture].
//
// # The rules in brief
//
//   - A call that might hang or invalidate a capture is never made while a
//     capture forbids it: the guard (guard.go) refuses it first. In Global
//     mode that includes other allocators' unsafe calls, process wide, as
//     in CUDA.
//   - Memory a graph allocated, or that its recorded work uses, is never
//     handed to anyone else before the graph is closed.
//   - A replay reads the pinned host buffers' current bytes: refresh inputs
//     by writing [HostBuffer.Bytes] between launches.
//   - Blocking driver calls, capture begin and end included, are bounded by
//     the watchdog ([Options.Watchdog]): past it the caller gets
//     [ErrCaptureTimeout]; the stuck call is abandoned and cleaned up when it
//     returns.
//   - Cleanup that must happen (Close, a graph's deferred frees) is never
//     refused and never invalidates a capture: it waits for Global-mode
//     captures to end.
//
// The whole truth table is in docs/design.md and the README; the
// reasoning in docs/allocator-core.md and docs/reliability.md.
//
// # Errors
//
// Every error wraps a sentinel (errors.go, or alloc/driver's for what a
// driver reports; match with errors.Is) inside an [*Error] that names the
// operation, backend, size and capture state. Bad input leaves the
// allocator's state as it was.
//
// # Seeing memory
//
// [SetProfileRate] turns on sampling of allocations with their Go stacks
// (off by default, one atomic load when off); [WriteProfile] and
// [Allocator.WriteProfile] write them as a pprof profile labelled by
// owner (pool-live, graph-owned, held-for-graph, ...). [Allocator.Snapshot]
// lists every segment, block and graph (package alloc/memmap holds its
// data). [Options.Name] tells allocators apart. Package alloc/allocview
// serves all of it, for every open allocator, over HTTP and expvar,
// alloc/allocprom to Prometheus (docs/device-memory.md).
//
// # Drivers
//
// Package alloc/driver is the whole contract a backend implements, in one
// place: the [driver.Driver] methods, the sentinel each failure must wrap
// (this package's errors of the same name are the same values), the
// optional interfaces, the device's capture safety, and
// [driver.DeviceWide] for device-wide calls that belong to no allocator.
// A backend proves itself with the conformance suite (package conformance:
// conformance.Run with a conformance.Factory); package alloc/alloctest has
// a Spy driver for engines' own tests.
package alloc
