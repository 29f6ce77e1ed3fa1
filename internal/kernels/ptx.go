package kernels

import _ "embed"

//go:generate go run ./nvrtcgen -o collectives.ptx

//go:embed collectives.ptx
var ptxText []byte

// ptx is the PTX, NUL-terminated as cuModuleLoadData reads it.
func ptx() []byte { return append(append([]byte(nil), ptxText...), 0) }
