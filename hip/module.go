package hip

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/rtc"
)

// The kernels on HIP: the module's source is compiled with hiprtc for the
// device's gcnArchName at LoadModule (Options.Compile replaces hiprtc),
// loaded with hipModuleLoadData and launched with hipModuleLaunchKernel,
// all from the runtime library (symbols.go). A launch makes the driver's
// device current on the calling thread first (and puts the thread's back
// after): whether HIP takes the device from the stream instead is not
// verified on an AMD GPU, and the call costs little.

// Compiler compiles HIP C++ source (named name in messages) for an AMD
// GPU architecture (a gcnArchName such as "gfx90a:sramecc+:xnack-") into a
// code object hipModuleLoadData loads.
type Compiler func(src, name, arch string) ([]byte, error)

// kernels is the driver's gpurt.Config.Kernels. It runs on the dev thread.
func (d *Driver) kernels(*gpurt.Setup) (*gpurt.KernelAPI, error) {
	rt := d.rt
	const op = "load module"
	var missing []string
	for _, s := range []gpurt.Sym{rt.getDevice, rt.moduleLoadData, rt.moduleGetFunction, rt.moduleUnload, rt.moduleLaunchKernel} {
		if s.Addr == 0 {
			missing = append(missing, s.Name)
		}
	}
	if rt.props.Addr == 0 && rt.propsR0600.Addr == 0 {
		missing = append(missing, rt.props.Name+" or "+rt.propsR0600.Name)
	}
	if len(missing) > 0 {
		return nil, errf(driver.ErrBackendUnavailable, "%s: %s lacks %v", op, rt.Path, missing)
	}
	arch, err := d.arch(op)
	if err != nil {
		return nil, err
	}
	var khz int32
	if code := gpurt.Call(rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&khz)), devAttrWallClockRate, uintptr(d.opts.Device)); code != 0 {
		err := rt.FailAs(driver.ErrBackendUnavailable, op+": the kernels' timer rate (hipDeviceAttributeWallClockRate)", rt.DeviceGetAttribute.Name, code)
		return nil, fmt.Errorf("%w (HIP runtime %s cannot say how fast wall_clock64 counts, so the kernels' timeouts cannot be set)", err, versionString(rt.Version))
	}
	if khz <= 0 {
		return nil, errf(driver.ErrDriver, "%s: hipDeviceAttributeWallClockRate is %d kHz", op, khz)
	}
	compile := d.opts.Compile
	if compile == nil {
		compile = d.hiprtc
	}
	return &gpurt.KernelAPI{
		ModuleLoadData: rt.moduleLoadData, ModuleGetFunction: rt.moduleGetFunction,
		ModuleUnload: rt.moduleUnload, LaunchKernel: rt.moduleLaunchKernel, Occupancy: rt.moduleOccupancy,
		GetCurrent: rt.getDevice, SetCurrent: rt.SetDevice, Current: uintptr(d.opts.Device),
		Check: rt.Check,
		Image: func(img driver.ModuleImage) ([]byte, error) {
			if img.Source == "" {
				return nil, errf(driver.ErrInvalidValue, "load module %s: the image has no source", img.Name)
			}
			code, err := compile(img.Source, img.Name, arch)
			if err != nil {
				return nil, fmt.Errorf("hip: load module %s: compile for %s: %w", img.Name, arch, err)
			}
			return code, nil
		},
		TimerHz: uint64(khz) * 1000,
	}, nil
}

// arch is the device's gcnArchName, from the properties struct of the
// newest layout the library has (abi.go).
func (d *Driver) arch(op string) (string, error) {
	rt := d.rt
	fn, at := rt.propsR0600, propsR0600ArchAt
	if fn.Addr == 0 {
		fn, at = rt.props, propsR0000ArchAt
	}
	buf := make([]byte, propsBufSize)
	if err := rt.Check(op+": device properties", fn.Name, gpurt.Call(fn.Addr, uintptr(unsafe.Pointer(&buf[0])), uintptr(d.opts.Device))); err != nil {
		return "", err
	}
	name := buf[at : at+gcnArchNameLen]
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	if len(name) < 4 || string(name[:3]) != "gfx" || len(name) == gcnArchNameLen {
		return "", errf(driver.ErrDriver, "%s: %s gave no gcnArchName (%q at offset %d)", op, fn.Name, name, at)
	}
	return string(name), nil
}

// hiprtc is the default Compiler: hiprtc, which ROCm 5.x exports from
// libamdhip64 itself (looked up in the runtime this driver loaded) and
// ROCm 6+ ships as libhiprtc.so.N (rtc.OpenHIPRTC's search). Bound once
// per process, on first use: loading a module is rare and outside
// captures.
func (d *Driver) hiprtc(src, name, arch string) ([]byte, error) {
	r, err := hiprtcFor(d.rt.Path)
	if err != nil {
		return nil, err
	}
	return r.CompileHIP(src, name, arch)
}

var hiprtcs sync.Map // runtime path -> *hiprtcOnce

type hiprtcOnce struct {
	once sync.Once
	r    *rtc.HIPRTC
	err  error
}

// hiprtcFor binds hiprtc in the runtime at path, or else from
// rtc.OpenHIPRTC's search.
func hiprtcFor(path string) (*rtc.HIPRTC, error) {
	v, _ := hiprtcs.LoadOrStore(path, &hiprtcOnce{})
	o := v.(*hiprtcOnce)
	o.once.Do(func() {
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) // the loaded runtime: the same handle
		if err == nil {
			if o.r, err = rtc.HIPRTCIn(path, h); err == nil {
				return
			}
		}
		in := err
		if o.r, err = rtc.OpenHIPRTC(); err != nil {
			o.err = fmt.Errorf("%w (and %s: %v)", err, path, in)
		}
	})
	return o.r, o.err
}
