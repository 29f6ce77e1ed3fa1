package alloctest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// forwarded are the optional interfaces the Spy forwards (and counts).
var forwarded = []reflect.Type{reflect.TypeFor[driver.HostFuncLauncher](), reflect.TypeFor[driver.IPCMemory](), reflect.TypeFor[driver.KernelLauncher](), reflect.TypeFor[driver.VirtualMemory](), reflect.TypeFor[driver.HostRegisterer](), reflect.TypeFor[driver.ManagedMemory]()}

// optional is every optional interface of alloc/driver, by name.
var optional = map[string]reflect.Type{}

func init() {
	for _, it := range []reflect.Type{
		reflect.TypeFor[driver.HostFuncLauncher](), reflect.TypeFor[driver.GraphMemTrimmer](), reflect.TypeFor[driver.StreamIdler](),
		reflect.TypeFor[driver.StreamPoller](), reflect.TypeFor[driver.PoolTrimmer](), reflect.TypeFor[driver.Aborter](),
		reflect.TypeFor[driver.MemInfoer](), reflect.TypeFor[driver.UsageReporter](), reflect.TypeFor[driver.DirectSpanner](),
		reflect.TypeFor[driver.IPCMemory](), reflect.TypeFor[driver.KernelLauncher](), reflect.TypeFor[driver.PeerAccess](),
		reflect.TypeFor[driver.VirtualMemory](), reflect.TypeFor[driver.HostRegisterer](), reflect.TypeFor[driver.ManagedMemory](),
	} {
		optional[it.Name()] = it
	}
}

// The Spy implements exactly the optional interfaces it forwards (its
// compile-time list in spy.go, and forwarded here), out of every one
// alloc/driver/optional.go declares (optional, checked against the file):
// an optional interface added to the driver package, or to the Spy, without
// the other lists fails here.
func TestSpyImplementsItsOptionalInterfaces(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../driver/optional.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
					if _, isIface := ts.Type.(*ast.InterfaceType); isIface {
						declared = append(declared, ts.Name.Name)
					}
				}
			}
		}
	}
	slices.Sort(declared)
	if names := slices.Sorted(maps.Keys(optional)); !slices.Equal(names, declared) {
		t.Fatalf("this test's optional interfaces %v; alloc/driver/optional.go declares %v", names, declared)
	}
	spy := reflect.TypeFor[*Spy]()
	for name, it := range optional {
		if has, fwd := spy.Implements(it), slices.Contains(forwarded, it); has != fwd {
			t.Errorf("Spy implements driver.%s: %v; forwards it (forwarded, and spy.go's list): %v", name, has, fwd)
		}
	}
}

// The Spy's method enum is the driver.Driver interface and the optional
// ones it forwards, one constant per method: a Driver method added without
// its constant (or the reverse) fails here, not as a silently uncounted
// call.
func TestMethodsAreTheDriverInterface(t *testing.T) {
	var want []string
	for _, it := range append([]reflect.Type{reflect.TypeFor[driver.Driver]()}, forwarded...) {
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
