// Package allochooks is how the module's own packages reach the
// allocator's process-wide state and calls without package alloc
// exporting them (engines do not call them): alloc's init sets every
// variable here, and a package that imports alloc (or is imported by it,
// as alloc/driver is) reads them. They are nil only in a program that
// does not link package alloc.
package allochooks

var (
	// DeviceWide and AfterGlobalCaptures are driver.DeviceWide's and
	// driver.AfterGlobalCaptures' implementations: the capture domains'
	// registry (alloc/domain.go).
	DeviceWide          func(domain, op string, fn func() error) error
	AfterGlobalCaptures func(domain string, fn func()) (ranNow bool)

	// Allocators lists the open allocators (*alloc.Allocator), sorted by
	// name; Lookup returns the one named name (nil if none). The views
	// (alloc/allocview, alloc/allocprom) read them through
	// alloc/internal/registry, which gives them their type.
	Allocators func() []any
	Lookup     func(name string) any
	// Name is an allocator's name (alloc.Options.Name, or the default
	// given); Usage is its memory by block state and graph pool, with its
	// counters, without listing the blocks (a memmap.Snapshot without
	// Segments and Graphs).
	Name  func(a any) string
	Usage func(a any) (any, error)
	// ProfileRate is alloc.SetProfileRate's current rate.
	ProfileRate func() int
	// History is an allocator's newest maxEvents events
	// (memmap.History; every event kept when maxEvents < 0), its
	// history's lock held only to copy them.
	History func(a any, maxEvents int) any
)

// The IPC memory calls, for the symmetric heap (and the conformance
// suite): a call that may block on the driver still goes through the
// allocator's guard (refused inside captures, bounded by the watchdog, its
// buffer pinned against a racing Free or Close). Device addresses are
// driver.DevicePtr values as uint64: alloc/driver imports this package.
var (
	// Export returns an IPC memory handle for b, a live AllocSync buffer
	// (alloc.Buffer) of allocator a (*alloc.Allocator): refused, no driver
	// call made, where an unsafe call is (ErrCaptureIllegalOp, or
	// ErrCaptureInvalidated), for a buffer of an expandable segment
	// (driver.ErrNotExportable), and with ErrInvalidValue when the driver
	// has no driver.IPCMemory.
	Export func(a, b any) ([]byte, error)
	// Open maps another process's allocation from its handle; the address
	// is not a's buffer (not counted, pooled or freed by it). Guarded like
	// Export; abandoned by the watchdog, the mapping is closed when the
	// call returns.
	Open func(a any, handle []byte) (uint64, error)
	// Close unmaps an address Open returned. Guarded like Export.
	Close func(a any, p uint64) error
)
