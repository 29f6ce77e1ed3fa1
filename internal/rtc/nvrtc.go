package rtc

import (
	"fmt"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
)

// NVRTC is an opened libnvrtc.
//
// nvrtc.h:
//
//	nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src,
//	  const char *name, int numHeaders, const char * const *headers,
//	  const char * const *includeNames);
//	nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
//	  const char * const *options);
//	nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
//	nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
//	nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
//	nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
//	nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
//	nvrtcResult nvrtcVersion(int *major, int *minor);
//	nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);  // NVRTC 11.1+
//	nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);              // NVRTC 11.1+
type NVRTC struct {
	Path  string
	c     compiler
	cubin *compiler // nil: this NVRTC makes no CUBIN (before 11.1)
}

// NVRTCSearch is where OpenNVRTC looks, in order, after $CAPALLOC_NVRTC_LIB.
var NVRTCSearch = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// OpenNVRTC opens the first NVRTC found; none is driver.ErrBackendUnavailable
// saying what was searched.
func OpenNVRTC() (*NVRTC, error) {
	search := NVRTCSearch
	if p := os.Getenv("CAPALLOC_NVRTC_LIB"); p != "" {
		search = []string{p}
	}
	return open("NVRTC", search, func(path string, h uintptr) (*NVRTC, error) {
		n := &NVRTC{Path: path, c: compiler{prefix: "nvrtc", output: "PTX"}}
		if err := bind(h, n.c.syms()); err != nil {
			return nil, err
		}
		cubin := n.c
		cubin.output = "CUBIN"
		if bind(h, cubin.syms()) == nil {
			n.cubin = &cubin
		}
		return n, nil
	})
}

// Version is NVRTC's version (major, minor).
func (n *NVRTC) Version() (int, int) { return n.c.versionOf() }

// CompilePTX compiles src (named name in messages) with opts and returns
// the PTX (without its terminating NUL). A rejected source is ErrCompile
// with the compiler's log.
func (n *NVRTC) CompilePTX(src, name string, opts []string) ([]byte, error) {
	ptx, err := n.c.run(src, name, opts)
	if err != nil {
		return nil, err
	}
	return []byte(strings.TrimRight(string(ptx), "\x00")), nil
}

// CompileCUBIN compiles src for a real architecture (opts name one, such
// as --gpu-architecture=sm_90) and returns the CUBIN and the compiler's
// log (with --ptxas-options=-v, ptxas's registers and spills per
// kernel). An NVRTC without CUBIN output is driver.ErrBackendUnavailable.
func (n *NVRTC) CompileCUBIN(src, name string, opts []string) ([]byte, string, error) {
	if n.cubin == nil {
		return nil, "", fmt.Errorf("%w: rtc: %s has no nvrtcGetCUBIN (NVRTC 11.1+)", driver.ErrBackendUnavailable, n.Path)
	}
	return n.cubin.runLog(src, name, opts)
}
