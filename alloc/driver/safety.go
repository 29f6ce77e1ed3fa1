package driver

import (
	"fmt"
	"strings"
)

// Capture safety (docs/capture-safety.md): which of the driver's capture
// rules the allocator trusts.
//
// Documented follows CUDA's documented rules as measured by cmd/cudatruth
// on a device whose table is recorded (an H100): an unsafe call is refused
// only where CUDA says it breaks a capture, and the cuda driver makes the
// "potentially unsafe" stream-ordered calls in Relaxed interaction mode.
// Strict assumes nothing: while any capture is active in the capture domain
// (any mode, any allocator) every synchronous allocation or free, host
// allocation or registration, and every call a driver would otherwise make
// in Relaxed interaction mode is refused before the driver. On GB10 a
// synchronous cudaMalloc during any capture hangs the driver (zerfoo/ztensor
// ADR 004); an unrecorded device may do the same.
type CaptureSafety int

const (
	// SafetyUnset: the driver did not classify the device; the allocator
	// uses Documented (the cpu emulation, test drivers).
	SafetyUnset CaptureSafety = iota
	SafetyDocumented
	SafetyStrict
)

func (s CaptureSafety) String() string {
	switch s {
	case SafetyDocumented:
		return "documented"
	case SafetyStrict:
		return "strict"
	case SafetyUnset:
		return "unset"
	}
	return fmt.Sprintf("CaptureSafety(%d)", int(s))
}

// ParseCaptureSafety reads the config-string value of capture_safety.
func ParseCaptureSafety(s string) (CaptureSafety, error) {
	switch s {
	case "strict":
		return SafetyStrict, nil
	case "documented":
		return SafetyDocumented, nil
	}
	return SafetyUnset, fmt.Errorf("%w: capture safety %q: want strict or documented", ErrInvalidValue, s)
}

// RecordedDevice is a device whose raw capture truth table
// (cmd/cudatruth -json) is recorded in cmd/cudatruth/testdata: on it the
// documented rules were measured to hold.
type RecordedDevice struct {
	NamePrefix        string // DeviceInfo.Name starts with it
	ComputeCapability string // "9.0"
	Table             string // the file under cmd/cudatruth/testdata
}

// RecordedDevices lists the recorded tables (cmd/cudatruth's test checks
// each file exists and names such a device). A GB10 table, once recorded,
// is added here and the device follows it.
var RecordedDevices = []RecordedDevice{
	{NamePrefix: "NVIDIA H100", ComputeCapability: "9.0", Table: "h100-driver580-cuda13.0.json"},
}

// ClassifySafety is a GPU driver's default capture safety for the device
// info describes, and the profile that names why: GB10 (compute capability
// 12.1, or any integrated device) and every device without a recorded
// table are Strict; a recorded device is Documented.
func ClassifySafety(info DeviceInfo) (CaptureSafety, string) {
	if info.ComputeCapability == "12.1" || strings.Contains(info.Name, "GB10") {
		return SafetyStrict, "gb10"
	}
	if info.Integrated {
		return SafetyStrict, "integrated"
	}
	for _, r := range RecordedDevices {
		if strings.HasPrefix(info.Name, r.NamePrefix) && info.ComputeCapability == r.ComputeCapability {
			return SafetyDocumented, "recorded:" + r.Table
		}
	}
	return SafetyStrict, "unrecorded"
}

// SafetyProfile is DeviceInfo's profile in one line, for capprobe
// -backends and errors: "strict (gb10, sm 12.1, integrated)".
func (i DeviceInfo) SafetyProfile() string {
	var b strings.Builder
	b.WriteString(i.effectiveSafety().String())
	parts := []string{}
	if i.Profile != "" {
		parts = append(parts, i.Profile)
	}
	if i.ComputeCapability != "" {
		parts = append(parts, "sm "+i.ComputeCapability)
	}
	if i.Integrated {
		parts = append(parts, "integrated")
	}
	switch {
	case i.ReadsHostInPlace():
		parts = append(parts, "pageable memory access via host page tables")
	case i.PageableMemoryAccess:
		parts = append(parts, "pageable memory access via mirrored page tables")
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	return b.String()
}

func (i DeviceInfo) effectiveSafety() CaptureSafety {
	if i.CaptureSafety == SafetyUnset {
		return SafetyDocumented
	}
	return i.CaptureSafety
}
