package gpurttest

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// FakeHIPRTC compiles with the hiprtc entry points of the fake
// libamdhip64 at lib (hip/testdata/fakehip.c, which exports them as ROCm
// 5.x's libamdhip64 does), for hip.Options.Compile: create the program,
// compile it with --offload-arch=<arch>, read the code object, destroy
// the program (hiprtc.h). It stands in for internal/rtc's hiprtc binding
// until that is wired into the hip driver, which then calls the same
// entry points of the fake.
func FakeHIPRTC(lib string) func(src, name, arch string) ([]byte, error) {
	return func(src, name, arch string) ([]byte, error) {
		h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			return nil, err
		}
		var create, compile, size, code, destroy uintptr
		for _, s := range []struct {
			name string
			p    *uintptr
		}{
			{"hiprtcCreateProgram", &create}, {"hiprtcCompileProgram", &compile},
			{"hiprtcGetCodeSize", &size}, {"hiprtcGetCode", &code}, {"hiprtcDestroyProgram", &destroy},
		} {
			if *s.p, err = purego.Dlsym(h, s.name); err != nil {
				return nil, err
			}
		}
		csrc, cname, opt := cstr(src), cstr(name), cstr("--offload-arch="+arch)
		var prog uintptr
		opts := [1]uintptr{uintptr(unsafe.Pointer(&opt[0]))} // opt is heap memory (cstr), which never moves
		if r := gpurt.Call(create, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); r != 0 {
			return nil, fmt.Errorf("hiprtcCreateProgram returned %d", r)
		}
		defer gpurt.Call(destroy, uintptr(unsafe.Pointer(&prog)))
		r := gpurt.Call(compile, prog, 1, uintptr(unsafe.Pointer(&opts)))
		runtime.KeepAlive(opt)
		if r != 0 {
			return nil, fmt.Errorf("hiprtcCompileProgram returned %d", r)
		}
		var n uint64
		if r := gpurt.Call(size, prog, uintptr(unsafe.Pointer(&n))); r != 0 || n == 0 {
			return nil, fmt.Errorf("hiprtcGetCodeSize returned %d (%d B)", r, n)
		}
		out := make([]byte, n)
		if r := gpurt.Call(code, prog, uintptr(unsafe.Pointer(&out[0]))); r != 0 {
			return nil, fmt.Errorf("hiprtcGetCode returned %d", r)
		}
		return out, nil
	}
}

// cstr is s NUL-terminated, in heap memory (not inlined, so the result
// always escapes).
//
//go:noinline
func cstr(s string) []byte { return append([]byte(s), 0) }
