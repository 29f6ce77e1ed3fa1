package alloc

// CheckPool runs the pool's invariant check (pool.check) for alloc_test.
func (a *Allocator) CheckPool() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pool.check()
}
