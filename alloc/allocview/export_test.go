package allocview

import "time"

// SetSnapshotTTL sets how long a snapshot serves requests, until the
// returned func restores it.
func SetSnapshotTTL(d time.Duration) (restore func()) { return snapshotCache.SetTTL(d) }

// BytesText is the views' size text.
func BytesText(n int64) string { return bytesText(n) }

// IndexShown is how many graphs, and graph pools, the index's tables show.
const IndexShown = indexShown
