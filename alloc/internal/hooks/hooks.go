// Package hooks is how the packages under alloc reach the allocator's
// process-wide state without package alloc exporting it: alloc's init sets
// every variable here, and a package that imports alloc (or is imported by
// it, as alloc/driver is) reads them. They are nil only in a program that
// does not link package alloc.
package hooks

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
	// given); BytesByState sums its memory by block state
	// (map[memmap.BlockState]int64) without listing the blocks.
	Name         func(a any) string
	BytesByState func(a any) (any, error)
	// ProfileRate is alloc.SetProfileRate's current rate.
	ProfileRate func() int
)
