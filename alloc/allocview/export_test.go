package allocview

import "time"

// SetSnapshotTTL sets how long a snapshot serves requests, until the
// returned func restores it.
func SetSnapshotTTL(d time.Duration) (restore func()) { return snapshotCache.SetTTL(d) }

// BytesText is the views' size text.
func BytesText(n int64) string { return bytesText(n) }
