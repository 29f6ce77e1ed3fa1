package alloctest

import "github.com/capalloc/capalloc/alloc/driver"

// VMBadInput makes the virtual-memory calls every driver.VirtualMemory
// must refuse with ErrInvalidValue, changing nothing, and returns each
// call's error by what it tries. The layout it expects: base reserves 8
// chunks of gran bytes, chunk 0 is mapped by one MapMemory and chunks 2-3
// by another, and m is a Malloc allocation of gran bytes. A driver's test
// adds the cases its own rules give.
func VMBadInput(vm driver.VirtualMemory, base, m driver.DevicePtr, gran int64) map[string]error {
	at := func(chunks int64) driver.DevicePtr { return base + driver.DevicePtr(chunks*gran) }
	return map[string]error{
		"reserve: size zero":           second(vm.ReserveAddress(0)),
		"reserve: size not a multiple": second(vm.ReserveAddress(gran + 4096)),
		"map: size not a multiple":     vm.MapMemory(at(5), gran+4096),
		"map: size zero":               vm.MapMemory(at(5), 0),
		"map: offset not a multiple":   vm.MapMemory(at(5)+4096, gran),
		"map: past the end":            vm.MapMemory(at(7), 2*gran),
		"map: already mapped":          vm.MapMemory(base, gran),
		"map: overlaps a mapping":      vm.MapMemory(at(1), 2*gran),
		"map: inside a mapping":        vm.MapMemory(at(3), gran),
		"map: a Malloc allocation":     vm.MapMemory(m, gran),
		"map: null":                    vm.MapMemory(0, gran),
		"unmap: half a mapping":        vm.UnmapMemory(at(2), gran),
		"unmap: two mappings at once":  vm.UnmapMemory(base, 4*gran),
		"unmap: not mapped":            vm.UnmapMemory(at(5), gran),
		"release: chunks mapped":       vm.ReleaseAddress(base, 8*gran),
		"release: wrong size":          vm.ReleaseAddress(base, 4*gran),
		"release: not the base":        vm.ReleaseAddress(at(1), 7*gran),
		"release: a Malloc allocation": vm.ReleaseAddress(m, gran),
	}
}

func second[T any](_ T, err error) error { return err }
