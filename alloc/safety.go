package alloc

// The device's capture safety is classified by the driver
// (driver.CaptureSafety, docs/capture-safety.md); what follows are the
// refusals strict safety adds.

// strictRefusal is the error of a call refused by strict capture safety:
// an unsafe call's refusal (unsafeRefused: ErrCaptureIllegalOp and
// ErrCaptureIncompatibleAllocation) that names the profile.
func (g *guard) strictRefusal(what string, n int) error {
	return unsafeRefused("%s: %d capture(s) active in the capture domain and the device's capture safety is %s; no driver call was made",
		what, n, g.profile)
}

// strictLocked returns strictRefusal when strict safety forbids what now:
// any capture active in the domain (the synchronous allocations and frees,
// and host allocation: what hangs GB10 during any capture). Nil otherwise.
func (g *guard) strictLocked(what string) error {
	if !g.strict {
		return nil
	}
	if n := g.dom.active(); n > 0 {
		return g.strictRefusal(what, n)
	}
	return nil
}

// strictRelaxedLocked returns strictRefusal when strict safety forbids
// what now, a call the documented rules would make in Relaxed interaction
// mode (pool growth, graph instantiation): a Global-mode capture active on
// another stream. A capture of another mode elsewhere is no reason: the
// documented rules make these calls then without switching modes, and
// refusing them would keep ranks of one process from capturing side by
// side. Nil otherwise.
func (g *guard) strictRelaxedLocked(what string) error {
	if !g.strict || !g.dom.globalElsewhere(g.stream) {
		return nil
	}
	return g.strictRefusal(what, g.dom.active())
}
