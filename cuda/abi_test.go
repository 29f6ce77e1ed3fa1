package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// The ABI values the driver passes and compares, by their CUDA names, as
// NVIDIA's headers give them (driver_types.h, cuda_runtime_api.h; cited in
// abi.go and internal/gpurt/abi.go): the shared constants in gpurt and
// this package's table. No CUDA header is installed to read them from, so
// they are written out here, as the bindgen output of every header from
// 11.4 to 13.0 gives them, and cudaCpuDeviceId as driver_types.h defines
// it, ((int)-1) (docs/abi-audit.md); a change to any of them is a change
// of ABI.
func TestABIValues(t *testing.T) {
	for name, c := range map[string]struct{ got, want int64 }{
		"cudaMemcpyHostToDevice":                   {int64(gpurt.MemcpyHostToDevice), 1},
		"cudaMemcpyDeviceToHost":                   {int64(gpurt.MemcpyDeviceToHost), 2},
		"cudaMemcpyDeviceToDevice":                 {int64(gpurt.MemcpyDeviceToDevice), 3},
		"cudaStreamCaptureStatusNone":              {int64(gpurt.CaptureStatusNone), 0},
		"cudaStreamCaptureStatusActive":            {int64(gpurt.CaptureStatusActive), 1},
		"cudaStreamCaptureStatusInvalidated":       {int64(gpurt.CaptureStatusInvalidated), 2},
		"cudaStreamCaptureModeGlobal":              {int64(gpurt.CaptureModeGlobal), 0},
		"cudaStreamCaptureModeThreadLocal":         {int64(gpurt.CaptureModeThreadLocal), 1},
		"cudaStreamCaptureModeRelaxed":             {int64(gpurt.CaptureModeRelaxed), 2},
		"cudaHostAllocPortable":                    {int64(gpurt.HostAllocPortable), 0x01},
		"cudaHostRegisterPortable":                 {int64(gpurt.HostRegisterPortable), 0x01},
		"cudaStreamNonBlocking":                    {int64(gpurt.StreamNonBlocking), 0x01},
		"cudaGraphInstantiateFlagAutoFreeOnLaunch": {int64(gpurt.GraphInstantiateAutoFreeOnLaunch), 1},
		"cudaMemPoolAttrReleaseThreshold":          {int64(gpurt.MemPoolAttrReleaseThreshold), 0x4},
		"cudaMemAllocationTypePinned":              {int64(gpurt.MemAllocationTypePinned), 0x1},
		"cudaMemHandleTypeNone":                    {int64(gpurt.MemHandleTypeNone), 0x0},
		"cudaMemHandleTypePosixFileDescriptor":     {int64(gpurt.MemHandleTypePosixFD), 0x1},
		"cudaMemLocationTypeDevice":                {int64(gpurt.MemLocationTypeDevice), 1},
		"cudaMemLocationTypeHost":                  {int64(gpurt.MemLocationTypeHost), 2},
		"cudaHostRegisterMapped":                   {int64(gpurt.HostRegisterMapped), 0x02},
		"cudaMemAttachGlobal":                      {int64(gpurt.MemAttachGlobal), 0x01},
		"cudaCpuDeviceId":                          {int64(gpurt.CPUDeviceID), -1},
		"CUDA_IPC_HANDLE_SIZE":                     {gpurt.IPCHandleSize, 64},
		"cudaIpcMemLazyEnablePeerAccess":           {ipcLazyEnablePeerAccess, 0x01},

		"cudaErrorMemoryAllocation":         {gpurt.CodeOutOfMemory, 2},
		"cudaErrorNotReady":                 {gpurt.CodeNotReady, 600},
		"cudaErrorPeerAccessAlreadyEnabled": {gpurt.CodePeerAccessAlreadyEnabled, 704},
		"cudaErrorNotSupported":             {gpurt.CodeNotSupported, 801},
		"cudaErrorStreamCaptureUnsupported": {gpurt.CodeStreamCaptureUnsupported, 900},
		"cudaErrorStreamCaptureInvalidated": {gpurt.CodeStreamCaptureInvalidated, 901},
		"cudaErrorStreamCaptureMerge":       {gpurt.CodeStreamCaptureMerge, 902},
		"cudaErrorStreamCaptureUnmatched":   {gpurt.CodeStreamCaptureUnmatched, 903},
		"cudaErrorStreamCaptureUnjoined":    {gpurt.CodeStreamCaptureUnjoined, 904},
		"cudaErrorStreamCaptureIsolation":   {gpurt.CodeStreamCaptureIsolation, 905},
		"cudaErrorStreamCaptureImplicit":    {gpurt.CodeStreamCaptureImplicit, 906},
		"cudaErrorCapturedEvent":            {gpurt.CodeCapturedEvent, 907},
		"cudaErrorStreamCaptureWrongThread": {gpurt.CodeStreamCaptureWrongThread, 908},
		"cudaErrorGraphExecUpdateFailure":   {gpurt.CodeGraphExecUpdateFailure, 910},
		"cudaErrorInsufficientDriver":       {errInsufficientDriver, 35},

		"cudaDevAttrMaxThreadsPerBlock":                     {int64(vendor.DevAttrMaxThreadsPerBlock), 1},
		"cudaDevAttrMultiProcessorCount":                    {int64(vendor.DevAttrMultiprocessorCount), 16},
		"cudaDevAttrIntegrated":                             {int64(vendor.DevAttrIntegrated), 18},
		"cudaDevAttrComputeCapabilityMajor":                 {int64(vendor.DevAttrComputeCapabilityMajor), 75},
		"cudaDevAttrComputeCapabilityMinor":                 {int64(vendor.DevAttrComputeCapabilityMinor), 76},
		"cudaDevAttrPageableMemoryAccess":                   {int64(vendor.DevAttrPageableMemoryAccess), 88},
		"cudaDevAttrPageableMemoryAccessUsesHostPageTables": {int64(vendor.DevAttrHostPageTables), 100},
		"cudaDevAttrMemoryPoolsSupported":                   {devAttrMemoryPoolsSupported, 115},
	} {
		require.Equal(t, c.want, c.got, name)
	}
}
