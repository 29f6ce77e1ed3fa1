package plugin_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/backends/plugin" // registers the plugin: scheme
	"github.com/capalloc/capalloc/symheap"
)

// The cpu backend in a process of its own: the allocator works as on any
// backend (this test binary serves the child, as a program does by
// calling plugin.ServeIfChild first in main).
func Example() {
	o, err := backends.OpenString(context.Background(), "plugin:cpu:plugin.call_timeout=30s")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Driver.Close()
	a, err := alloc.New(o.Driver, alloc.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()

	x, _ := a.Alloc(4)
	_ = a.Upload(x, 0, []byte{1, 2, 3, 4})
	out := make([]byte, 4)
	_ = a.Download(out, x, 0)
	fmt.Println(o.Driver.Name(), out)
	_ = a.Free(x)
	// Output:
	// plugin:cpu [1 2 3 4]
}

// What plugin mode refuses, before any call to the child: expandable
// segments (a reservation would live in the child's address space), the
// host symmetric heap (its collectives are host functions, Go closures of
// the engine's process) and the device heap (the host driver has no IPC
// memory handles). Each error wraps errors.ErrUnsupported.
func Example_refused() {
	o, err := backends.OpenString(context.Background(), "plugin:cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Driver.Close()

	refused := func(what string, err error) {
		if !errors.Is(err, errors.ErrUnsupported) {
			fmt.Printf("%s: not refused (%v)\n", what, err)
			return
		}
		fmt.Printf("%s: refused: %v\n", what, err)
	}
	_, err = alloc.New(o.Driver, alloc.Options{ExpandableSegments: true})
	refused("expandable segments", err)

	a, _ := alloc.New(o.Driver, alloc.Options{})
	defer a.Close()
	g, _ := symheap.NewGroup(1, 1<<16)
	defer g.Close()
	_, err = g.Open(0, a, symheap.Options{})
	refused("symmetric heap", err)
	_, err = symheap.OpenDevice(0, a, symheap.NewLocalExchange(1), 1<<20, symheap.DeviceOptions{})
	refused("device heap", err)
	// Output:
	// expandable segments: refused: capalloc plugin:cpu: New [capture=none]: unsupported operation: expandable segments need a driver with virtual memory management (driver.VirtualMemory); backend plugin:cpu has none
	// symmetric heap: refused: unsupported operation: symheap: backend plugin:cpu (collectives need host functions and host-addressable device memory: cpu)
	// device heap: refused: unsupported operation: symheap: backend plugin:cpu has no IPC memory handles (a device heap needs driver.IPCMemory: cuda, hip)
}
