package allocview

import "time"

// SetSnapshotTTL sets how long a snapshot serves requests, until the
// returned func restores it.
func SetSnapshotTTL(d time.Duration) (restore func()) {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	old := snapshotTTL
	snapshotTTL = d
	cache.snaps = nil
	return func() {
		cache.mu.Lock()
		defer cache.mu.Unlock()
		snapshotTTL = old
		cache.snaps = nil
	}
}

// BytesText is the views' size text.
func BytesText(n int64) string { return bytesText(n) }
