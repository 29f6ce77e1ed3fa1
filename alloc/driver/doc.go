// Package driver is the contract between capalloc's allocator and a
// backend, as database/sql/driver is between database/sql and a database
// driver. Engines use package alloc; backend authors implement the
// interfaces here, and engines import this package only for the types
// they pass through (DevicePtr, Stream, DeviceInfo, CaptureMode).
//
// # The contract, in one place
//
//   - [Driver]: the methods every backend implements (streams, allocation,
//     copies, capture, graphs), each with the sentinel its failures wrap
//     and whether it is "unsafe" (may synchronize implicitly: the
//     allocator never makes it while a capture forbids it).
//   - Optional interfaces, found with a type assertion; a backend
//     implements those it can, and each is used by the allocator or
//     another package of this module:
//     [HostFuncLauncher] (host work in stream order: alloc, symheap,
//     conformance), [GraphMemTrimmer] and [PoolTrimmer] (the allocator's
//     out-of-memory ladder), [StreamIdler] and [StreamPoller] (waits
//     without a hand-off), [Aborter] (the watchdog ends a stuck backend
//     process), [VirtualMemory] (expandable segments,
//     docs/virtual-memory.md), [HostRegisterer] (the engine's own host
//     memory pinned and mapped: alloc.Host.Register, docs/host-memory.md), [ManagedMemory] (managed
//     memory and its prefetch: alloc.Host.AllocManaged), [IPCMemory], [KernelLauncher] and
//     [PeerAccess] (the symmetric heap's device collectives,
//     docs/device-collectives.md), [UsageReporter] (the conformance
//     suite's leak checks), [DirectSpanner] (the plugin server's copies),
//     [MemInfoer] (free device memory, in out-of-memory errors and
//     metrics).
//   - Registration: a backend package registers an [Opener] in its init
//     with [Register] (a scheme such as "plugin:" with [RegisterScheme]);
//     the opener reads its [Options] (typed getters, [Options.Check];
//     errors wrap [ErrInvalidConfig]) and the [Memory] a program handed
//     it. Package backends opens registered backends by name ([Lookup],
//     [Registered]); the registry is here because a driver package
//     imports this package, never backends (docs/design.md, "Layers").
//   - Errors: the sentinels of errors.go. A failure wraps the one the
//     method's documentation names, with context; package alloc's errors
//     of the same name are the same values, so errors.Is matches across
//     both.
//   - The device: [DeviceInfo], its alignment ([MaxAlignment],
//     [CheckAlignment]) and its capture safety ([CaptureSafety],
//     [ClassifySafety], [RecordedDevices]; docs/capture-safety.md).
//   - The capture domain: [DeviceWide] runs a device-wide call that
//     belongs to no allocator under the domain's guard;
//     [AfterGlobalCaptures] defers work that must happen until no
//     Global-mode capture is active. Both are implemented by package
//     alloc's capture domains; in a program without package alloc they
//     run the function at once.
//
// Every method must be safe for concurrent use. A backend proves itself
// with the conformance suite (package conformance: conformance.Run with a
// conformance.Factory); the rules behind the contract are in
// docs/design.md.
package driver
