package kernels

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/rtc"
)

// ptxEntries lists the kernels a PTX module defines.
func ptxEntries(ptx []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`).FindAllSubmatch(ptx, -1) {
		out[string(m[1])] = true
	}
	return out
}

func checkEntries(t *testing.T, what string, ptx []byte) {
	t.Helper()
	entries := ptxEntries(ptx)
	for _, k := range Names {
		if !entries[k] {
			t.Errorf("%s has no .entry %s (it has %v)", what, k, entries)
		}
	}
}

// The committed PTX defines every kernel the drivers look up.
func TestCommittedPTXHasEveryKernel(t *testing.T) {
	checkEntries(t, "collectives.ptx", ptxText)
	for _, want := range []string{"\n.version 7.8\n", "\n.target sm_70\n"} {
		if !bytes.Contains(ptxText, []byte(want)) {
			t.Errorf("collectives.ptx lacks %q", strings.TrimSpace(want))
		}
	}
}

// NVRTC compiles Source with NVRTCOptions; with the NVRTC release that
// made collectives.ptx (its header names it), the output is the committed
// file byte for byte: the PTX in the repository is the source's.
func TestNVRTCReproducesPTX(t *testing.T) {
	n, err := rtc.OpenNVRTC()
	if errors.Is(err, driver.ErrBackendUnavailable) {
		t.Skipf("no NVRTC installed (Debian: libnvrtc11.2, contrib/non-free): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.CompilePTX(Source(), "collectives.cu", NVRTCOptions)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "NVRTC's PTX", got)
	major, minor := n.Version()
	m := regexp.MustCompile(`(?m)^// Cuda compilation tools, release (\d+)\.(\d+),`).FindSubmatch(ptxText)
	if m == nil {
		t.Fatal("collectives.ptx does not say which NVRTC made it")
	}
	if have, made := fmt.Sprintf("%d.%d", major, minor), string(m[1])+"."+string(m[2]); have != made {
		t.Skipf("collectives.ptx was made by NVRTC %s, this is %s (%s): its PTX differs; set CAPALLOC_NVRTC_LIB to an NVRTC %s to compare", made, have, n.Path, made)
	}
	if !bytes.Equal(got, ptxText) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(ptxText), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Fatalf("collectives.ptx is not what NVRTC %d.%d makes of the source (run go generate ./internal/kernels): line %d is %q, NVRTC gives %q", major, minor, i+1, line(wl), line(gl))
	}
	t.Logf("NVRTC %d.%d (%s): %d B of PTX, identical to collectives.ptx", major, minor, n.Path, len(got))
}

// hiprtc compiles Source for each AMD architecture .ci/run checks into an
// ELF code object for that processor that defines every kernel (its code
// and its kernel descriptor, name.kd, which hipModuleGetFunction finds).
func TestHIPRTCCompilesKernels(t *testing.T) {
	r, err := rtc.OpenHIPRTC()
	if errors.Is(err, driver.ErrBackendUnavailable) {
		t.Skipf("no hiprtc installed (Debian: libamdhip64-5 with libamd-comgr2): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// EF_AMDGPU_MACH_AMDGCN_* (the low byte of e_flags), from LLVM's ELF.h.
	for _, tc := range []struct {
		arch string
		mach uint32
	}{{"gfx90a", 0x3f}, {"gfx1030", 0x36}} {
		t.Run(tc.arch, func(t *testing.T) {
			code, err := r.CompileHIP(Source(), "collectives.cu", tc.arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(code, []byte(elf.ELFMAG)) {
				t.Fatalf("not an ELF file: % x", code[:min(16, len(code))])
			}
			f, err := elf.NewFile(bytes.NewReader(code))
			if err != nil {
				t.Fatal(err)
			}
			if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_AMDGPU {
				t.Fatalf("%v %v: not an AMD GPU code object", f.Class, f.Machine)
			}
			// e_flags: offset 48 of an ELF64 header (debug/elf does not read it).
			if flags := binary.LittleEndian.Uint32(code[48:52]); flags&0xff != tc.mach {
				t.Fatalf("e_flags %#x: not for %s (mach %#x)", flags, tc.arch, tc.mach)
			}
			syms, err := f.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]elf.SymType{}
			for _, s := range syms {
				kinds[s.Name] = elf.ST_TYPE(s.Info)
			}
			for _, k := range Names {
				if kinds[k] != elf.STT_FUNC || kinds[k+".kd"] != elf.STT_OBJECT {
					t.Errorf("%s: kernel %s is not defined (function %v, descriptor %v)", tc.arch, k, kinds[k], kinds[k+".kd"])
				}
			}
			t.Logf("%s: %d B code object from hiprtc in %s", tc.arch, len(code), r.Path)
		})
	}
}

// The host sizes the aligned variants' grids by what a thread moves per
// round: AlignedCopyPacks and AlignedSumPacks are the source's CA_UNROLL
// and CA_RUNROLL.
func TestAlignedUnrollMatchesSource(t *testing.T) {
	for name, want := range map[string]int{"CA_UNROLL": AlignedCopyPacks, "CA_RUNROLL": AlignedSumPacks} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindStringSubmatch(source)
		if m == nil {
			t.Fatalf("collectives.cu defines no %s", name)
		}
		if m[1] != fmt.Sprint(want) {
			t.Errorf("collectives.cu has %s %s, the Go mirror %d", name, m[1], want)
		}
	}
}

// Every kernel of the committed PTX takes one parameter, a struct of the
// size the Go encoder launching it writes (cuLaunchKernel copies that many
// bytes from the one kernelParams pointer): the collectives and the
// aligned variants a Coll, the point-to-point kernels a P2P, AllToAllV its
// own, Axpy an AxpyArgs.
func TestPTXParamsMatchEncoders(t *testing.T) {
	want := map[string]int{Put: P2PSize, Signal: P2PSize, WaitSignal: P2PSize, AllToAllV: AllToAllVSize, Axpy: AxpySize}
	for _, k := range []string{Barrier, AllReduceOneShot, AllReduceTwoShot, AllGather, AllToAll, ReduceScatter} {
		want[k] = CollSize
	}
	for _, k := range Aligned {
		want[k] = CollSize
	}
	entry := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(\n((?:\s*\.param[^\n]*\n)*)\)`)
	param := regexp.MustCompile(`^\s*\.param \.align 8 \.b8 (\w+)_param_0\[(\d+)\],?$`)
	seen := map[string]bool{}
	for _, m := range entry.FindAllSubmatch(ptxText, -1) {
		name, params := string(m[1]), strings.Split(strings.TrimRight(string(m[2]), "\n"), "\n")
		seen[name] = true
		size, ok := want[name]
		if !ok {
			t.Errorf("collectives.ptx has .entry %s, which no encoder launches", name)
			continue
		}
		p := param.FindStringSubmatch(params[0])
		if len(params) != 1 || p == nil || p[1] != name {
			t.Errorf("%s: parameters %q, want one 8-aligned struct", name, params)
			continue
		}
		if p[2] != fmt.Sprint(size) {
			t.Errorf("%s: the PTX's parameter is %s B, the encoder writes %d B", name, p[2], size)
		}
	}
	for _, k := range Names {
		if !seen[k] {
			t.Errorf("collectives.ptx has no .entry %s", k)
		}
	}
}
