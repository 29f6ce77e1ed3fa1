package conformance_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/conformance"
	"github.com/capalloc/capalloc/cpu"
)

// A backend proves itself by running the suite on its driver from its own
// tests: a Factory opens a fresh driver for each subtest (Run closes it).
// In the backend's package:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, open) }
func ExampleRun() {
	open := func(t testing.TB) driver.Driver {
		d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	_ = conformance.Factory(open) // conformance.Run(t, open) in a test
}
