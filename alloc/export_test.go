package alloc

// CheckPool runs the pool's invariant check (pool.check) for alloc_test.
func (a *Allocator) CheckPool() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pool.check()
}

// CheckArena runs the pool's invariant check on a graph pool's arena.
func (gp *GraphPool) CheckArena() error {
	gp.a.mu.Lock()
	defer gp.a.mu.Unlock()
	return gp.arena.check()
}

// The hooks' implementations, for alloc_test's compile-time assertions
// (hooks_test.go).
var (
	IPCCalls       = ipcCalls{}
	RegistrySource = registrySource{}
)
