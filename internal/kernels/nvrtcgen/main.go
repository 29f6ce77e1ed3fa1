// Command nvrtcgen writes collectives.ptx: the kernels' source compiled
// by NVRTC with kernels.NVRTCOptions (compute_70, so Volta and every later
// GPU, H100's sm_90 and GB10's sm_121 included, JIT-compiles it at load).
// Run by go generate in internal/kernels; .ci/run runs it and fails on a
// diff.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/rtc"
)

func main() {
	out := flag.String("o", "collectives.ptx", "output file")
	flag.Parse()
	n, err := rtc.OpenNVRTC()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvrtcgen:", err)
		os.Exit(1)
	}
	ptx, err := n.CompilePTX(kernels.Source(), "collectives.cu", kernels.NVRTCOptions)
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
