package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/internal/allochooks"
	"github.com/capalloc/capalloc/internal/allocipc"
)

// What alloc installs in internal/allochooks implements the interfaces
// its readers declare: checked when this file compiles, for the two
// hooks whose interfaces name alloc's types.
var (
	_ allocipc.Calls  = alloc.IPCCalls
	_ registry.Source = alloc.RegistrySource
)

// alloc's init installed every hook, each of the type its reader asserts.
func TestHooksInstalled(t *testing.T) {
	if allochooks.Domains == nil {
		t.Error("allochooks.Domains not installed: driver.DeviceWide would run outside the capture domains")
	}
	if _, ok := allochooks.IPC.(allocipc.Calls); !ok {
		t.Errorf("allochooks.IPC holds %T, not an allocipc.Calls", allochooks.IPC)
	}
	if _, ok := allochooks.Registry.(registry.Source); !ok {
		t.Errorf("allochooks.Registry holds %T, not a registry.Source", allochooks.Registry)
	}
}
