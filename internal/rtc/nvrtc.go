// Package rtc binds the vendors' runtime compilers through purego (no
// cgo): NVRTC, which turns the kernels' CUDA C++ into PTX (go generate in
// internal/kernels), and hiprtc, which compiles them for an AMD device at
// run time. Signatures are cited from nvrtc.h and hiprtc.h.
package rtc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// ErrCompile: the compiler rejected the source; the error carries its log.
var ErrCompile = errors.New("rtc: compilation failed")

// NVRTC is an opened libnvrtc.
type NVRTC struct {
	Path string
	// nvrtc.h:
	//   nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src,
	//     const char *name, int numHeaders, const char * const *headers,
	//     const char * const *includeNames);
	//   nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
	//     const char * const *options);
	//   nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
	//   nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
	//   nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
	//   nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
	//   nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
	//   nvrtcResult nvrtcVersion(int *major, int *minor);
	create, compile, ptxSize, getPTX, logSize, getLog, destroy, version uintptr
}

// NVRTCSearch is where OpenNVRTC looks, in order, after $CAPALLOC_NVRTC_LIB.
var NVRTCSearch = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// OpenNVRTC opens the first NVRTC found; none is alloc.ErrBackendUnavailable
// saying what was searched.
func OpenNVRTC() (*NVRTC, error) {
	search := NVRTCSearch
	if p := os.Getenv("CAPALLOC_NVRTC_LIB"); p != "" {
		search = []string{p}
	}
	var tried []string
	for _, name := range search {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		n := &NVRTC{Path: name}
		syms := []struct {
			name string
			p    *uintptr
		}{
			{"nvrtcCreateProgram", &n.create}, {"nvrtcCompileProgram", &n.compile},
			{"nvrtcGetPTXSize", &n.ptxSize}, {"nvrtcGetPTX", &n.getPTX},
			{"nvrtcGetProgramLogSize", &n.logSize}, {"nvrtcGetProgramLog", &n.getLog},
			{"nvrtcDestroyProgram", &n.destroy}, {"nvrtcVersion", &n.version},
		}
		var missing []string
		for _, s := range syms {
			if *s.p, err = purego.Dlsym(h, s.name); err != nil || *s.p == 0 {
				missing = append(missing, s.name)
			}
		}
		if len(missing) > 0 {
			tried = append(tried, fmt.Sprintf("%s (lacks %v)", name, missing))
			continue
		}
		return n, nil
	}
	return nil, fmt.Errorf("%w: rtc: no usable NVRTC library; searched %s", alloc.ErrBackendUnavailable, strings.Join(tried, ", "))
}

// Version is NVRTC's version (major, minor).
func (n *NVRTC) Version() (int, int) {
	var major, minor int32
	call(n.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))
	return int(major), int(minor)
}

// CompilePTX compiles src (named name in messages) with opts and returns
// the PTX (without its terminating NUL). A rejected source is ErrCompile
// with the compiler's log.
func (n *NVRTC) CompilePTX(src, name string, opts []string) ([]byte, error) {
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	if r := call(n.create, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); r != 0 {
		return nil, fmt.Errorf("rtc: nvrtcCreateProgram returned %d", r)
	}
	defer call(n.destroy, uintptr(unsafe.Pointer(&prog)))
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts)+1)
	for i, o := range opts {
		copts[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	r := call(n.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	log := n.log(prog)
	if r != 0 {
		return nil, fmt.Errorf("%w: %s: nvrtcCompileProgram returned %d:\n%s", ErrCompile, name, r, log)
	}
	var size uint64
	if r := call(n.ptxSize, prog, uintptr(unsafe.Pointer(&size))); r != 0 || size == 0 {
		return nil, fmt.Errorf("rtc: nvrtcGetPTXSize returned %d (size %d)", r, size)
	}
	out := make([]byte, size)
	if r := call(n.getPTX, prog, uintptr(unsafe.Pointer(&out[0]))); r != 0 {
		return nil, fmt.Errorf("rtc: nvrtcGetPTX returned %d", r)
	}
	return []byte(strings.TrimRight(string(out), "\x00")), nil
}

func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if call(n.logSize, prog, uintptr(unsafe.Pointer(&size))) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	call(n.getLog, prog, uintptr(unsafe.Pointer(&b[0])))
	return strings.TrimRight(string(b), "\x00")
}

// call invokes a C function returning an int result code.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

func cstr(s string) []byte { return append([]byte(s), 0) }
