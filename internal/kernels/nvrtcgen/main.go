// Command nvrtcgen writes collectives.ptx: the kernels' source compiled
// by NVRTC for compute_70, so Volta and every later GPU (H100's sm_90,
// GB10's sm_121) JIT-compiles it at load. Run by go generate in
// internal/kernels; .ci/run runs it and fails on a diff.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/rtc"
)

// Options are the compilation's: the oldest architecture with the
// acquire/release PTX and __nanosleep the source uses, and no fast-math
// (the sums must round the way the fakes' host build does).
var Options = []string{"--gpu-architecture=compute_70", "--std=c++14", "-default-device"}

func main() {
	out := flag.String("o", "collectives.ptx", "output file")
	flag.Parse()
	n, err := rtc.OpenNVRTC()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvrtcgen:", err)
		os.Exit(1)
	}
	ptx, err := n.CompilePTX(kernels.Source(), "collectives.cu", Options)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvrtcgen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, ptx, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "nvrtcgen:", err)
		os.Exit(1)
	}
	major, minor := n.Version()
	fmt.Printf("nvrtcgen: %s: %d B of PTX from NVRTC %d.%d (%s)\n", *out, len(ptx), major, minor, n.Path)
}
