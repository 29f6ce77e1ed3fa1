package alloctest

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// The Spy's method enum is the driver.Driver interface and the optional
// ones it forwards, one constant per method: a Driver method added without
// its constant (or the reverse) fails here, not as a silently uncounted
// call.
func TestMethodsAreTheDriverInterface(t *testing.T) {
	var want []string
	for _, it := range []reflect.Type{reflect.TypeFor[driver.Driver](), reflect.TypeFor[driver.HostFuncLauncher](), reflect.TypeFor[driver.IPCMemory](), reflect.TypeFor[driver.KernelLauncher](), reflect.TypeFor[driver.VirtualMemory](), reflect.TypeFor[driver.HostRegisterer]()} {
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
		t.Fatalf("Method constants %v\ndo not match driver.Driver's methods %v", got, want)
	}
}

// The Spy forwards driver.IPCMemory only where the inner driver has it: over
// one without (cpu), each call is counted and fails with
// alloc.ErrInvalidValue, as the Allocator reports a driver without IPC.
func TestIPCWithoutInnerIPC(t *testing.T) {
	s := NewSpy(noIPC{})
	_, err := s.IPCGetMemHandle(1)
	if !errors.Is(err, alloc.ErrInvalidValue) {
		t.Fatalf("IPCGetMemHandle: %v", err)
	}
	if _, err := s.IPCOpenMemHandle(make([]byte, 64)); !errors.Is(err, alloc.ErrInvalidValue) {
		t.Fatalf("IPCOpenMemHandle: %v", err)
	}
	if err := s.IPCCloseMemHandle(1); !errors.Is(err, alloc.ErrInvalidValue) {
		t.Fatalf("IPCCloseMemHandle: %v", err)
	}
	for _, m := range []Method{MethodIPCGetMemHandle, MethodIPCOpenMemHandle, MethodIPCCloseMemHandle} {
		if s.Calls(m) != 1 {
			t.Fatalf("%v counted %d times", m, s.Calls(m))
		}
	}
}

// noIPC is a driver with no IPC; only Name is called.
type noIPC struct{ driver.Driver }

func (noIPC) Name() string { return "noipc" }

// Over a driver without virtual memory the Spy's MapGranularity is 0,
// which alloc.New reads as none: expandable segments are refused there as
// on the inner driver.
func TestVirtualMemoryWithoutInner(t *testing.T) {
	s := NewSpy(noIPC{})
	if g := s.MapGranularity(); g != 0 {
		t.Fatalf("MapGranularity = %d, want 0", g)
	}
	if _, err := s.ReserveAddress(1 << 21); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("ReserveAddress: %v", err)
	}
	if err := s.MapMemory(1<<21, 1<<21); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("MapMemory: %v", err)
	}
	if _, err := alloc.New(s, alloc.Options{ExpandableSegments: true}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New with expandable segments over a spy without virtual memory: %v", err)
	}
}
