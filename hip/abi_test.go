package hip

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// The ABI values the driver uses, by their names in the installed headers:
// internal/gpurt's constants, which HIP shares with CUDA, and this
// package's table, which is HIP's own. The device attributes are implicit
// enum members, so the values are counted as the compiler counts them.
func TestSharedABIMatchesHeader(t *testing.T) {
	var src []byte
	for _, p := range []string{headerPath, "/usr/include/hip/driver_types.h"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Skipf("HIP header not installed (apt-get install libamdhip64-dev): %v", err)
		}
		src = append(append(src, b...), '\n')
	}
	values := headerValues(string(src))
	for name, want := range map[string]int64{
		"hipMemcpyHostToDevice":                   int64(gpurt.MemcpyHostToDevice),
		"hipMemcpyDeviceToHost":                   int64(gpurt.MemcpyDeviceToHost),
		"hipMemcpyDeviceToDevice":                 int64(gpurt.MemcpyDeviceToDevice),
		"hipStreamCaptureStatusNone":              int64(gpurt.CaptureStatusNone),
		"hipStreamCaptureStatusActive":            int64(gpurt.CaptureStatusActive),
		"hipStreamCaptureStatusInvalidated":       int64(gpurt.CaptureStatusInvalidated),
		"hipStreamCaptureModeGlobal":              int64(gpurt.CaptureModeGlobal),
		"hipStreamCaptureModeThreadLocal":         int64(gpurt.CaptureModeThreadLocal),
		"hipStreamCaptureModeRelaxed":             int64(gpurt.CaptureModeRelaxed),
		"hipHostMallocPortable":                   int64(gpurt.HostAllocPortable),
		"hipHostRegisterPortable":                 int64(gpurt.HostRegisterPortable),
		"hipStreamNonBlocking":                    int64(gpurt.StreamNonBlocking),
		"hipGraphInstantiateFlagAutoFreeOnLaunch": int64(gpurt.GraphInstantiateAutoFreeOnLaunch),
		"hipMemPoolAttrReleaseThreshold":          int64(gpurt.MemPoolAttrReleaseThreshold),
		"hipMemAllocationTypePinned":              int64(gpurt.MemAllocationTypePinned),
		"hipMemHandleTypeNone":                    int64(gpurt.MemHandleTypeNone),
		"hipMemHandleTypePosixFileDescriptor":     int64(gpurt.MemHandleTypePosixFD),
		"hipMemLocationTypeDevice":                int64(gpurt.MemLocationTypeDevice),
		"hipHostRegisterMapped":                   int64(gpurt.HostRegisterMapped),
		"hipMemAttachGlobal":                      int64(gpurt.MemAttachGlobal),
		"hipCpuDeviceId":                          int64(gpurt.CPUDeviceID),
		"HIP_IPC_HANDLE_SIZE":                     gpurt.IPCHandleSize,
		"hipIpcMemLazyEnablePeerAccess":           ipcLazyEnablePeerAccessBefore6,

		"hipErrorOutOfMemory":                 gpurt.CodeOutOfMemory,
		"hipErrorNotReady":                    gpurt.CodeNotReady,
		"hipErrorPeerAccessAlreadyEnabled":    gpurt.CodePeerAccessAlreadyEnabled,
		"hipErrorNotSupported":                gpurt.CodeNotSupported,
		"hipErrorStreamCaptureUnsupported":    gpurt.CodeStreamCaptureUnsupported,
		"hipErrorStreamCaptureInvalidated":    gpurt.CodeStreamCaptureInvalidated,
		"hipErrorStreamCaptureMerge":          gpurt.CodeStreamCaptureMerge,
		"hipErrorStreamCaptureUnmatched":      gpurt.CodeStreamCaptureUnmatched,
		"hipErrorStreamCaptureUnjoined":       gpurt.CodeStreamCaptureUnjoined,
		"hipErrorStreamCaptureIsolation":      gpurt.CodeStreamCaptureIsolation,
		"hipErrorStreamCaptureImplicit":       gpurt.CodeStreamCaptureImplicit,
		"hipErrorCapturedEvent":               gpurt.CodeCapturedEvent,
		"hipErrorStreamCaptureWrongThread":    gpurt.CodeStreamCaptureWrongThread,
		"hipErrorGraphExecUpdateFailure":      gpurt.CodeGraphExecUpdateFailure,
		"hipErrorNoDevice":                    errNoDevice,
		"hipErrorInsufficientDriver":          errInsufficientDriver,
		"hipErrorHostMemoryNotRegistered":     errHostMemoryNotRegistered,
		"hipErrorHostMemoryAlreadyRegistered": errHostMemoryAlreadyReg,

		"hipDeviceAttributeIntegrated":                             int64(vendor.DevAttrIntegrated),
		"hipDeviceAttributeMaxThreadsPerBlock":                     int64(vendor.DevAttrMaxThreadsPerBlock),
		"hipDeviceAttributeMultiprocessorCount":                    int64(vendor.DevAttrMultiprocessorCount),
		"hipDeviceAttributeComputeCapabilityMajor":                 int64(vendor.DevAttrComputeCapabilityMajor),
		"hipDeviceAttributeComputeCapabilityMinor":                 int64(vendor.DevAttrComputeCapabilityMinor),
		"hipDeviceAttributePageableMemoryAccess":                   int64(vendor.DevAttrPageableMemoryAccess),
		"hipDeviceAttributePageableMemoryAccessUsesHostPageTables": int64(vendor.DevAttrHostPageTables),
		"hipDeviceAttributeMemoryPoolsSupported":                   devAttrMemoryPoolsSupported,
	} {
		got, ok := values[name]
		require.True(t, ok, "%s not found in the header", name)
		require.Equal(t, want, got, name)
	}
}

// headerValues reads the integer #defines and the enum members of C
// header text: a member without a value is one more than the one before
// it; one whose value is not a literal or an earlier member is left out,
// and so are the implicit members after it.
func headerValues(src string) map[string]int64 {
	src = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(src, " ")
	src = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(src, "")
	values := map[string]int64{}
	intCast := regexp.MustCompile(`^\(\(int\)\s*(\S+)\)$`) // ((int)-1), as hipCpuDeviceId is defined
	literal := func(s string) (int64, bool) {
		s = strings.TrimSpace(s)
		if m := intCast.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		s = strings.TrimRight(s, "uUlL")
		v, err := strconv.ParseInt(s, 0, 64)
		return v, err == nil
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*#define\s+(\w+)\s+(\S+)\s*$`).FindAllStringSubmatch(src, -1) {
		if v, ok := literal(m[2]); ok {
			values[m[1]] = v
		}
	}
	for _, body := range regexp.MustCompile(`(?s)\benum\b[^{;()]*\{(.*?)\}`).FindAllStringSubmatch(src, -1) {
		next, known := int64(0), true
		lines := regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(body[1], "")
		for _, member := range strings.Split(lines, ",") {
			name, expr, explicit := strings.Cut(member, "=")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if explicit {
				v, ok := literal(expr)
				if !ok {
					v, ok = values[strings.TrimSpace(expr)]
				}
				next, known = v, ok
			}
			if known {
				values[name] = next
			}
			next++
		}
	}
	return values
}
