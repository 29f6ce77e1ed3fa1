// Package step is a step executor for engines that capture their hot loop:
// a step is three regions run on one allocator's stream,
//
//   - Pre, run eagerly at every step: the producers that cannot be captured
//     (a pageable upload from a Go slice, an algorithm search, anything
//     the registry names);
//   - Captured, run eagerly for Config.WarmUp warm-up steps, captured
//     (alloc.Allocator.WithCapture) and launched on the next, replayed
//     (alloc.Graph.Launch) at every step after;
//   - Post, run eagerly at every step (reading the outputs, sampling).
//
// A capture that fails for a capture reason (any alloc capture sentinel:
// an illegal or refused operation, a refused pageable copy, an invalidated
// capture, a driver that cannot capture; an operation named in the
// Registry; a workspace first allocated inside the capture with
// Config.RefuseLazyWorkspace; a panic inside Captured) is ended by the
// allocator, which releases everything it took and returns to
// alloc.StateNone; the step records why (Step.Err, Stats), says so (a
// warning per reason, Config.Logger; the process's totals, ProcessTotals,
// which alloc/allocprom exports) and runs the region eagerly, that step
// and every later one, or until Config.RetryAfter eager steps have passed
// and it tries capturing again; with Config.FallbackIsError the failed
// capture is Run's error instead.
// Any other error of a region is the step's: Run returns it, wrapping
// ErrRegion.
//
// The Registry (Default, NonCapturable, IsNonCapturable) is where an
// engine records the operations it knows cannot be captured, so it can
// place them in Pre before capturing; Step.Op checks one from inside the
// captured region. docs/step-executor.md has the whole contract.
package step
