package plugin

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The host driver must not offer virtual memory: a reservation lives in the
// child's address space, and mapped chunks could not be shared with the
// host (driver.VirtualMemory). A method added under one of its names would
// make the pool grow expandable segments through the plugin.
func TestHostDriverHasNoVirtualMemory(t *testing.T) {
	if _, ok := any((*Driver)(nil)).(driver.VirtualMemory); ok {
		t.Fatal("plugin.Driver implements driver.VirtualMemory")
	}
}
