package symheap

// SetMaxGrid overrides the heap's co-resident grid limit, so a test can
// launch a grid the device cannot hold (TestFakeOversizeGridTimesOut).
func SetMaxGrid(h *DeviceHeap, g uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxGrid = g
}

// MaxGrid is the heap's co-resident grid limit.
func MaxGrid(h *DeviceHeap) uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxGrid
}
