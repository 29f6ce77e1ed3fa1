package alloc

// idleNow is Synchronize's and Query's fast path when the driver is a
// StreamIdler: under the same refusals as the blocking call, it asks,
// inline, whether the stream has nothing left to do. idle true means the
// caller is done (err is the failure of work already run); a non-nil err is
// final either way; idle false and no error means "make the watched call".
// It steps aside (false, nil) whenever it could wait: the gate held or
// wanted by a capture begin or end, or a call still stuck in the driver
// (the watched path then refuses or waits under the deadline).
func (a *Allocator) idleNow(op string) (idle bool, err error) {
	if a.idler == nil || a.watchdog.stuck.Load() > 0 || !a.dom.gate.TryRLock() {
		return false, nil
	}
	defer a.dom.gate.RUnlock()
	a.mu.Lock()
	st, err := a.stateLocked()
	if err == nil {
		err = a.syncRefusalLocked(st)
	}
	a.mu.Unlock()
	if err == nil {
		idle, err = a.idler.StreamIdle(a.stream)
	}
	if err != nil {
		return false, a.fail(op, -1, st, err)
	}
	return idle, nil
}
