package alloc

import "fmt"

// Workspace returns the named scratch buffer, at least size bytes, owned by
// the allocator (free it with ReleaseWorkspace, never Free). Reserve every
// workspace before capturing: a reserved one is returned in any capture
// state with no allocation. One first needed inside this allocator's capture
// is allocated into the graph, counted in CaptureAllocCount and reported in
// the graph's warnings; it lives as long as that graph. During a capture the
// allocator did not start, or an invalidated one, a missing or too small
// workspace is an error.
func (a *Allocator) Workspace(name string, size int64) (Buffer, error) {
	b, err := workspace(a, name, size)
	if err != nil && a.opts.OnOutOfMemory != nil {
		return afterOutOfMemory(a, "Workspace", size, err, func() (Buffer, error) { return a.Workspace(name, size) })
	}
	return b, err
}

func workspace(a *Allocator, name string, size int64) (Buffer, error) {
	op := "Workspace(" + name + ")"
	if size <= 0 {
		return Buffer{}, a.fail(op, size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return Buffer{}, a.fail(op, size, StateNone, ErrClosed)
	}
	old := a.workspaces[name]
	if old != nil && old.live() && old.size >= size {
		return Buffer{blk: old, gen: old.state.Load(), ptr: old.ptr, size: old.size}, nil
	}
	a.wsAlloc = name // its allocation's (and out-of-memory error's) event says whose
	defer func() { a.wsAlloc = "" }()
	st, mayGrow, err := a.guard.allocStateLocked()
	if why := neverFits(a, size); err == nil && why != "" {
		err = outOfMemory(a, size, why, nil)
	}
	var b Buffer
	if err == nil {
		switch st {
		case StateNone:
			b, err = a.poolAllocLocked(size, mayGrow)
		case StateActive:
			if b, err = a.guard.cap.allocLocked(a, op, size); err == nil {
				a.guard.cap.lazyWS = append(a.guard.cap.lazyWS, name)
			}
		default:
			err = refusal(st, fmt.Sprintf("workspace %q not reserved before the capture", name))
		}
	}
	if err != nil {
		return Buffer{}, a.fail(op, size, st, err)
	}
	if old != nil && old.live() {
		old.ws = ""
		_ = a.freeLocked(st, old, old.state.Load()) // too small: replaced; pooled or deferred
	}
	a.workspaces[name] = b.blk // named at its hand-out (handOutLocked, from a.wsAlloc)
	if profileRate.Load() != 0 {
		a.prof.sample(b.blk, nil, size)
	}
	return b, nil
}

// ReleaseWorkspace frees the named workspace, under Free's rules.
func (a *Allocator) ReleaseWorkspace(name string) error {
	a.mu.Lock()
	ws := a.workspaces[name]
	if ws == nil || !ws.live() {
		a.mu.Unlock()
		return a.fail("ReleaseWorkspace("+name+")", -1, StateNone, wrapf(ErrInvalidBuffer, "no workspace %q", name))
	}
	b := Buffer{blk: ws, gen: ws.state.Load(), ptr: ws.ptr, size: ws.size}
	ws.ws = ""
	delete(a.workspaces, name)
	a.mu.Unlock()
	if err := a.Free(b); err != nil {
		a.mu.Lock()
		if ws.live() { // refused: keep it registered
			ws.ws = name
			a.workspaces[name] = ws
		}
		a.mu.Unlock()
		return err
	}
	return nil
}
