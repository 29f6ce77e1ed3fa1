package rtc

import (
	"fmt"
	"os"
	"regexp"

	"github.com/capalloc/capalloc/alloc/driver"
)

// HIPRTC is an opened hiprtc: libhiprtc.so.N (ROCm >= 6) or, in ROCm 5.x,
// libamdhip64 itself, which exports the hiprtc entry points.
//
// hiprtc.h (ROCm 5.2.3, Debian's libamdhip64-dev):
//
//	hiprtcResult hiprtcCreateProgram(hiprtcProgram* prog, const char* src,
//	  const char* name, int numHeaders, const char** headers,
//	  const char** includeNames);
//	hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions,
//	  const char** options);
//	hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t* codeSizeRet);
//	hiprtcResult hiprtcGetCode(hiprtcProgram prog, char* code);
//	hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t* logSizeRet);
//	hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char* log);
//	hiprtcResult hiprtcDestroyProgram(hiprtcProgram* prog);
//	hiprtcResult hiprtcVersion(int* major, int* minor);
//
// hiprtcResult is an enum (int); HIPRTC_SUCCESS is 0 and
// HIPRTC_ERROR_COMPILATION 6.
type HIPRTC struct {
	Path string
	c    compiler
}

// HIPRTCSearch is where OpenHIPRTC looks, in order, after
// $CAPALLOC_HIPRTC_LIB: ROCm >= 6's libhiprtc, then ROCm 5's libamdhip64.
var HIPRTCSearch = []string{"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so", "libamdhip64.so.5", "libamdhip64.so"}

// OpenHIPRTC opens the first hiprtc found; none is
// driver.ErrBackendUnavailable saying what was searched.
func OpenHIPRTC() (*HIPRTC, error) {
	search := HIPRTCSearch
	if p := os.Getenv("CAPALLOC_HIPRTC_LIB"); p != "" {
		search = []string{p}
	}
	return open("hiprtc", search, bindHIPRTC)
}

// HIPRTCIn binds hiprtc in a library already opened (h is its dlopen
// handle, path its name): the hip driver passes its libamdhip64, which in
// ROCm 5.x is where hiprtc lives. A library without every entry point is
// driver.ErrBackendUnavailable naming the missing ones.
func HIPRTCIn(path string, h uintptr) (*HIPRTC, error) {
	r, err := bindHIPRTC(path, h)
	if err != nil {
		return nil, fmt.Errorf("%w: rtc: %s has no hiprtc: %v", driver.ErrBackendUnavailable, path, err)
	}
	return r, nil
}

func bindHIPRTC(path string, h uintptr) (*HIPRTC, error) {
	r := &HIPRTC{Path: path, c: compiler{prefix: "hiprtc", output: "Code"}}
	return r, bind(h, r.c.syms())
}

// Version is hiprtc's version (major, minor).
func (r *HIPRTC) Version() (int, int) { return r.c.versionOf() }

// archName is a gcnArchName: a processor and its target features.
var archName = regexp.MustCompile(`^gfx[0-9a-f]+(:[a-z]+[+-])*$`)

// CompileHIP compiles src (named name in messages) for the AMD GPU
// architecture arch and returns the code object, an ELF file that
// hipModuleLoadData loads. arch is the device's gcnArchName, such as
// "gfx90a" or "gfx90a:sramecc+:xnack-" (hiprtc 5.2.3 takes it as
// --offload-arch=; its --gpu-architecture= is nvcc's spelling, rewritten
// with a warning). Anything else is driver.ErrInvalidValue, before any
// call: an empty arch would make hiprtc ask the current device, and one
// this hiprtc does not know can abort the process inside it (measured with
// 5.2.3: "gfx9999" and "gfx942" die in hiprtcCompileProgram with
// "munmap_chunk(): invalid pointer"), which is why the arch must come from
// a device the installed ROCm runs. A rejected source is ErrCompile with
// the compiler's log.
func (r *HIPRTC) CompileHIP(src, name, arch string) ([]byte, error) {
	if !archName.MatchString(arch) {
		return nil, fmt.Errorf("%w: rtc: %s: %q is not an AMD GPU architecture (a gcnArchName such as gfx90a)", driver.ErrInvalidValue, name, arch)
	}
	return r.c.run(src, name, []string{"--offload-arch=" + arch})
}
