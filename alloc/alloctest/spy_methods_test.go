package alloctest

import (
	"reflect"
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// The Spy's method enum is the alloc.Driver interface and the optional
// ones it forwards, one constant per method: a Driver method added without
// its constant (or the reverse) fails here, not as a silently uncounted
// call.
func TestMethodsAreTheDriverInterface(t *testing.T) {
	var want []string
	for _, it := range []reflect.Type{reflect.TypeFor[alloc.Driver](), reflect.TypeFor[alloc.HostFuncLauncher]()} {
		for i := range it.NumMethod() {
			want = append(want, it.Method(i).Name)
		}
	}
	var got []string
	for m := range numMethods {
		got = append(got, m.String())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Method constants %v\ndo not match alloc.Driver's methods %v", got, want)
	}
}
