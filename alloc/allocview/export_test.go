package allocview

import "time"

// SetSnapshotTTL sets how long a snapshot serves requests, until the
// returned func restores it.
func SetSnapshotTTL(d time.Duration) (restore func()) { return snapshotCache.SetTTL(d) }
