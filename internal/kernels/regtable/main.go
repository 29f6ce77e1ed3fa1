// Command regtable writes the kernels' register and occupancy table of
// docs/device-collectives.md: collectives.cu compiled by NVRTC to CUBIN
// for real architectures, with kernels.NVRTCOptions but the architecture
// and ptxas's -v report, and from each kernel's registers the 512-thread
// blocks one multiprocessor holds. The GPU asks the driver instead at
// module load (driver.KernelLauncher.MaxActiveBlocks: the driver's JIT may
// allocate other counts); this table is what the source costs.
//
//	go run ./internal/kernels/regtable               # print the table
//	go run ./internal/kernels/regtable -w docs/device-collectives.md
//
// -w replaces the text between the file's regtable markers. It needs
// NVRTC 11.1+ ($CAPALLOC_NVRTC_LIB, or the search of internal/rtc).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/rtc"
)

// arch is a real architecture and the per-multiprocessor limits that
// bound residency (CUDA C++ Programming Guide, "Features and Technical
// Specifications", per compute capability): 64 K 32-bit registers,
// allocated per warp in units of 256; at most threads threads and blocks
// blocks.
type arch struct {
	name            string
	threads, blocks int
}

var archs = []arch{
	{"sm_70", 2048, 32},
	{"sm_80", 2048, 32},
	{"sm_89", 1536, 24},
	{"sm_90", 2048, 32},
}

const (
	block       = 512 // the device heap's threads a block (symheap)
	regsPerSM   = 64 << 10
	regUnit     = 256 // registers are allocated per warp in units of this
	warpThreads = 32
)

// blocksPerSM is how many blocks of block threads using regs registers a
// thread one multiprocessor of a holds (shared memory, at most 520 B a
// block here, does not bind).
func blocksPerSM(a arch, regs int) int {
	perWarp := (regs*warpThreads + regUnit - 1) / regUnit * regUnit
	byRegs := regsPerSM / perWarp / (block / warpThreads)
	return min(byRegs, a.threads/block, a.blocks)
}

// usage is one kernel's ptxas report on one architecture.
type usage struct{ regs, spillStores, spillLoads int }

var (
	entryRe = regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	spillRe = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	regsRe  = regexp.MustCompile(`Used (\d+) registers`)
)

// parse reads ptxas's -v log: kernel -> usage.
func parse(log string) map[string]usage {
	out := map[string]usage{}
	var cur string
	for _, l := range strings.Split(log, "\n") {
		if m := entryRe.FindStringSubmatch(l); m != nil {
			cur = m[1]
			continue
		}
		u := out[cur]
		if m := spillRe.FindStringSubmatch(l); m != nil {
			u.spillStores, _ = strconv.Atoi(m[1])
			u.spillLoads, _ = strconv.Atoi(m[2])
		}
		if m := regsRe.FindStringSubmatch(l); m != nil {
			u.regs, _ = strconv.Atoi(m[1])
		}
		if cur != "" {
			out[cur] = u
		}
	}
	return out
}

func main() {
	write := flag.String("w", "", "file whose regtable section to replace (default: print)")
	flag.Parse()
	if err := run(*write); err != nil {
		fmt.Fprintln(os.Stderr, "regtable:", err)
		os.Exit(1)
	}
}

func run(write string) error {
	n, err := rtc.OpenNVRTC()
	if err != nil {
		return err
	}
	b, err := table(n)
	if err != nil {
		return err
	}
	if write == "" {
		_, err := os.Stdout.Write(b)
		return err
	}
	return replaceSection(write, b)
}

// table compiles the kernels with n for every arch and renders the table.
func table(n *rtc.NVRTC) ([]byte, error) {
	use := map[string]map[string]usage{} // arch -> kernel -> usage
	for _, a := range archs {
		opts := slices.Clone(kernels.NVRTCOptions)
		for i, o := range opts {
			if strings.HasPrefix(o, "--gpu-architecture=") {
				opts[i] = "--gpu-architecture=" + a.name
			}
		}
		_, log, err := n.CompileCUBIN(kernels.Source(), "collectives.cu", append(opts, "--ptxas-options=-v"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		use[a.name] = parse(log)
		for _, k := range kernels.Names {
			if use[a.name][k].regs == 0 {
				return nil, fmt.Errorf("%s: no register count for %s in ptxas's report:\n%s", a.name, k, log)
			}
		}
	}
	major, minor := n.Version()
	var b bytes.Buffer
	names := make([]string, len(archs))
	for i, a := range archs {
		names[i] = a.name
	}
	fmt.Fprintf(&b, "NVRTC %d.%d, `go run ./internal/kernels/regtable`; blocks of %d threads one multiprocessor holds, from the registers and its thread and block limits (at most 520 B of shared memory a block, alltoallv's, binds nothing):\n\n", major, minor, block)
	fmt.Fprintf(&b, "| kernel | registers %s | spill stores / loads, B | %d-thread blocks per SM %s |\n|---|---|---|---|\n",
		strings.Join(names, " / "), block, strings.Join(names, " / "))
	for _, k := range kernels.Names {
		var regs, spills, blocks []string
		for _, a := range archs {
			u := use[a.name][k]
			regs = append(regs, strconv.Itoa(u.regs))
			blocks = append(blocks, strconv.Itoa(blocksPerSM(a, u.regs)))
			if u.spillStores+u.spillLoads > 0 {
				spills = append(spills, fmt.Sprintf("%s: %d / %d", a.name, u.spillStores, u.spillLoads))
			}
		}
		if len(spills) == 0 {
			spills = []string{"none"}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.TrimPrefix(k, "capalloc_"), strings.Join(regs, " / "), strings.Join(spills, "; "), strings.Join(blocks, " / "))
	}
	return b.Bytes(), nil
}

const (
	begin = "<!-- regtable: begin (go run ./internal/kernels/regtable -w docs/device-collectives.md) -->\n"
	end   = "<!-- regtable: end -->"
)

// replaceSection puts table between the markers of the file at path.
func replaceSection(path string, table []byte) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no regtable markers:\n%s%s", path, begin, end)
	}
	out := append(append(append([]byte(nil), doc[:i+len(begin)]...), table...), doc[j:]...)
	return os.WriteFile(path, out, 0o644)
}
