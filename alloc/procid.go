package alloc

import _ "unsafe" // go:linkname

// procPin and procUnpin are the runtime's own (sync.Pool uses them): the
// index of the P the goroutine runs on, pinned to it until procUnpin. The
// lock-free lane (shard.go) takes the index and unpins at once: it picks
// the P's cache, whose lock keeps it correct if the goroutine then moves.
// The runtime keeps both reachable by linkname (go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
