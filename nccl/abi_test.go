package nccl

import (
	"math"
	"testing"
	"unsafe"
)

// The ABI values passed to NCCL and RCCL and compared with what they
// return, by their names in nccl.h.in, as NVIDIA/nccl gives them at every
// tag from v2.9.9-1 to v2.30.7-1 and, those RCCL declares, ROCm/rccl from
// rocm-5.4.0 (RCCL 2.13.4) to its newest (docs/abi-audit.md). No header is installed to read them from, so they
// are written out here; a change to any of them is a change of ABI.
func TestABIValues(t *testing.T) {
	for name, c := range map[string]struct{ got, want int64 }{
		"ncclInt32":               {int64(Int32), 2},
		"ncclFloat32":             {int64(Float32), 7},
		"ncclSum":                 {int64(Sum), 0},
		"ncclInProgress":          {ncclInProgress, 7},
		"NCCL_SPLIT_NOCOLOR":      {NoColor, -1},
		"NCCL_WIN_COLL_SYMMETRIC": {winCollSymmetric, 0x01},
		"NCCL_UNIQUE_ID_BYTES":    {UniqueIDBytes, 128},
		"sizeof(ncclUniqueId)":    {int64(unsafe.Sizeof(UniqueID{})), 128},
		"NCCL_API_MAGIC":          {configMagic, 0xcafebeef},
		"NCCL_VERSION(2,17,0)":    {configVersion, 2*10000 + 17*100},
		"NCCL_CONFIG_UNDEF_INT":   {configUndef, math.MinInt32},
		// ncclConfig_v21700: size_t size at 0, magic 8, version 12,
		// blocking 16, cgaClusterSize 20, minCTAs 24, maxCTAs 28,
		// netName 32; 40 bytes.
		"offsetof(magic)":          {int64(unsafe.Offsetof(configABI{}.magic)), 8},
		"offsetof(version)":        {int64(unsafe.Offsetof(configABI{}.version)), 12},
		"offsetof(cgaClusterSize)": {int64(unsafe.Offsetof(configABI{}.cgaClusterSize)), 20},
		"offsetof(minCTAs)":        {int64(unsafe.Offsetof(configABI{}.minCTAs)), 24},
		"offsetof(maxCTAs)":        {int64(unsafe.Offsetof(configABI{}.maxCTAs)), 28},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, the header's %d", name, c.got, c.want)
		}
	}
}
