package plugin

import (
	"reflect"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Every driver.Driver method the host forwards has its opcode: a Driver
// method added without one fails here (Name, Info and CaptureDomain are
// answered from the open reply; Abort, PID and Usage are the host's own).
func TestEveryDriverMethodHasAnOpcode(t *testing.T) {
	ops := map[string]bool{}
	for o := opcode(1); o < numOps; o++ {
		ops[o.String()] = true
	}
	local := map[string]bool{"Name": true, "Info": true, "CaptureDomain": true}
	it := reflect.TypeFor[driver.Driver]()
	for i := range it.NumMethod() {
		if n := it.Method(i).Name; !local[n] && !ops[n] {
			t.Errorf("driver.Driver.%s has no plugin opcode", n)
		}
	}
}
