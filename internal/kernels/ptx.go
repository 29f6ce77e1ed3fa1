package kernels

import _ "embed"

//go:generate go run ./nvrtcgen -o collectives.ptx

//go:embed collectives.ptx
var ptxText []byte

// NVRTCOptions are the options collectives.ptx is compiled with: the
// oldest architecture with the acquire/release PTX and __nanosleep the
// source uses, so Volta and every later GPU (H100's sm_90, GB10's sm_121)
// JIT-compiles it at load, and no fast-math (the sums must round the way
// the fakes' host build does).
var NVRTCOptions = []string{"--gpu-architecture=compute_70", "--std=c++14", "-default-device"}

// ptx is the PTX, NUL-terminated as cuModuleLoadData reads it.
func ptx() []byte { return append(append([]byte(nil), ptxText...), 0) }
