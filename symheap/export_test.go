package symheap

// CountsRecord is a counts error record as the kernel lays it out, for a
// test to write into a pad (TestFakeCorruptCountsRecordRefused).
var CountsRecord = countsRecord

// SetMaxGrid overrides the heap's co-resident grid limit, so a test can
// launch a grid the device cannot hold (TestFakeOversizeGridTimesOut).
func SetMaxGrid(h *DeviceHeap, g uint32) { withLock(h, func() { h.maxGrid = g }) }

// MaxGrid is the heap's co-resident grid limit.
func MaxGrid(h *DeviceHeap) (g uint32) {
	withLock(h, func() { g = h.maxGrid })
	return g
}

// ForceAligned makes the heap launch the aligned kernel variants whatever
// the operands, so a test can show that a misaligned operand faults in
// them (and so must never reach them).
func ForceAligned(h *DeviceHeap, on bool) { withLock(h, func() { h.forceAligned = on }) }

// MaxGridAligned is the aligned variants' co-resident grid limit (0: the
// heap does not use them).
func MaxGridAligned(h *DeviceHeap) (g uint32) {
	withLock(h, func() { g = h.maxGridAligned })
	return g
}

// withLock runs fn with h's lock held, as the heap's own methods read and
// write these fields.
func withLock(h *DeviceHeap, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
}

// SetRecordedOneShotMax replaces the recorded crossover table for a test
// and returns a function that restores it.
func SetRecordedOneShotMax(rows []OneShotRow) (restore func()) {
	old := recordedOneShotMax
	recordedOneShotMax = rows
	return func() { recordedOneShotMax = old }
}

// OneShotMax is the heap's agreed Auto crossover.
func OneShotMax(h *DeviceHeap) int64 { return h.oneShotMax }

// SetRecordedCopyEngineMin replaces the recorded copy-engine table for a
// test and returns a function that restores it.
func SetRecordedCopyEngineMin(rows []CopyEngineRow) (restore func()) {
	old := recordedCopyEngineMin
	recordedCopyEngineMin = rows
	return func() { recordedCopyEngineMin = old }
}

// CopyEngineMin is the heap's agreed Auto copy-engine threshold for op.
func CopyEngineMin(h *DeviceHeap, op string) int64 {
	for i, n := range copyOpNames {
		if n == op {
			return h.copyMin[i]
		}
	}
	return -1
}
