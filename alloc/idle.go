package alloc

// idleNow is Synchronize's and Query's fast path when the driver is a
// StreamIdler: under the same refusals as the blocking call, it asks,
// inline, whether the stream has nothing left to do. idle true means the
// caller is done (err is the failure of work already run); a non-nil err is
// final either way; idle false and no error means "make the watched call".
// It steps aside (false, nil) whenever it could wait: the gate held or
// wanted by a capture begin or end, or a call still stuck in the driver
// (the watched path then refuses or waits under the deadline).
func (g *guard) idleNow(op string) (idle bool, err error) {
	if g.idler == nil || g.watchdog.stuck.Load() > 0 || !g.dom.gate.TryRLock() {
		return false, nil
	}
	defer g.dom.gate.RUnlock()
	g.mu.Lock()
	st, err := g.stateLocked()
	if err == nil {
		err = g.syncRefusalLocked(st)
	}
	g.mu.Unlock()
	if err == nil {
		idle, err = g.idler.StreamIdle(g.stream)
	}
	if err != nil {
		return false, g.fail(op, -1, st, err)
	}
	return idle, nil
}
