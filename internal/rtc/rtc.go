// Package rtc binds the vendors' runtime compilers through purego (no
// cgo): NVRTC, which turns the kernels' CUDA C++ into PTX (go generate in
// internal/kernels), and hiprtc, which compiles them for an AMD device at
// run time. Signatures are cited from nvrtc.h and hiprtc.h.
package rtc

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrCompile: the compiler rejected the source; the error carries its log.
var ErrCompile = errors.New("rtc: compilation failed")

// compiler is the call sequence NVRTC and hiprtc share (hiprtc copies
// NVRTC's API): create a program from source, compile it with options,
// read its log and its output, destroy it. Each field is the entry point
// named by the prefix ("nvrtc", "hiprtc") plus the suffix in syms.
type compiler struct {
	prefix, output string // "nvrtc", "PTX"; "hiprtc", "Code"

	create, compile, outSize, getOut, logSize, getLog, destroy, version uintptr
}

// syms lists the compiler's entry points with their names.
func (c *compiler) syms() []sym {
	p := c.prefix
	return []sym{
		{p + "CreateProgram", &c.create}, {p + "CompileProgram", &c.compile},
		{p + "Get" + c.output + "Size", &c.outSize}, {p + "Get" + c.output, &c.getOut},
		{p + "GetProgramLogSize", &c.logSize}, {p + "GetProgramLog", &c.getLog},
		{p + "DestroyProgram", &c.destroy}, {p + "Version", &c.version},
	}
}

type sym struct {
	name string
	p    *uintptr
}

// bind resolves syms in the library h; it names every one that is missing.
func bind(h uintptr, syms []sym) error {
	var missing []string
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			missing = append(missing, s.name)
			continue
		}
		*s.p = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("lacks %s", strings.Join(missing, ", "))
	}
	return nil
}

// open returns the compiler of the first name in search that dlopen
// accepts and fresh binds (fresh fails when an entry point is missing).
// None is driver.ErrBackendUnavailable naming each name with its reason.
func open[C any](what string, search []string, fresh func(path string, h uintptr) (*C, error)) (*C, error) {
	var tried []string
	for _, name := range search {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		c, err := fresh(name, h)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: rtc: no usable %s library; searched %s", driver.ErrBackendUnavailable, what, strings.Join(tried, ", "))
}

// versionOf calls <prefix>Version(int *major, int *minor).
func (c *compiler) versionOf() (int, int) {
	var major, minor int32
	call(c.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))
	return int(major), int(minor)
}

// run compiles src (named name in messages) with opts and returns the
// output (PTX without its terminating NUL, or a code object). A rejected
// source is ErrCompile with the compiler's log.
func (c *compiler) run(src, name string, opts []string) ([]byte, error) {
	out, _, err := c.runLog(src, name, opts)
	return out, err
}

// runLog is run that also returns the compiler's log of a successful
// compilation (ptxas's -v report, for one).
func (c *compiler) runLog(src, name string, opts []string) ([]byte, string, error) {
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	// <prefix>CreateProgram(&prog, src, name, numHeaders=0, headers=NULL, includeNames=NULL)
	if r := call(c.create, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); r != 0 {
		return nil, "", fmt.Errorf("rtc: %sCreateProgram returned %d", c.prefix, r)
	}
	defer call(c.destroy, uintptr(unsafe.Pointer(&prog)))
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts)+1)
	for i, o := range opts {
		copts[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	r := call(c.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	log := c.log(prog)
	if r != 0 {
		return nil, log, fmt.Errorf("%w: %s: %sCompileProgram(%s) returned %d:\n%s", ErrCompile, name, c.prefix, strings.Join(opts, " "), r, log)
	}
	var size uint64
	if r := call(c.outSize, prog, uintptr(unsafe.Pointer(&size))); r != 0 || size == 0 {
		return nil, log, fmt.Errorf("rtc: %sGet%sSize returned %d (size %d)", c.prefix, c.output, r, size)
	}
	out := make([]byte, size)
	if r := call(c.getOut, prog, uintptr(unsafe.Pointer(&out[0]))); r != 0 {
		return nil, log, fmt.Errorf("rtc: %sGet%s returned %d", c.prefix, c.output, r)
	}
	return out, log, nil
}

func (c *compiler) log(prog uintptr) string {
	var size uint64
	if call(c.logSize, prog, uintptr(unsafe.Pointer(&size))) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	call(c.getLog, prog, uintptr(unsafe.Pointer(&b[0])))
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
