package alloc

import _ "unsafe" // go:linkname

// procPin and procUnpin are the runtime's own (sync.Pool uses them): the
// index of the P the goroutine runs on, pinned to it until procUnpin. The
// per-P lane (shard.go) takes the index and unpins at once: it picks the
// P's cache, whose lock keeps it correct if the goroutine then moves.
// The runtime keeps both reachable by linkname (go.dev/issue/67401).
//
// Why not a sync.Pool of blocks, which is per-P already: the garbage
// collector empties a sync.Pool (each GC drops what it holds past one
// cycle), and a dropped block is device memory nobody would give back to
// the driver again: a leak, not a cache miss. And a sync.Pool has no
// drain barrier: nothing lets a capture, a memory walk or Close stop
// every Get and Put in flight and take the cached blocks back, which the
// lane's closeLocked and flushLocked do under the shards' locks.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
