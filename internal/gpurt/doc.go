// Package gpurt is the runtime layer the cuda and hip drivers share: the
// logic of an driver.Driver over a stream-ordered GPU runtime bound with
// purego (no cgo), written once and parameterised by a small per-vendor
// table (Vendor: names, ABI constants, codes) and the vendor's resolved
// symbols (Syms, each with its own name for error messages).
//
// What lives here: the hot-call helpers (Call, CallHot), the library
// search and loader, the two locked OS threads (device and capture), the
// stream, copy, capture, graph and pool paths, Relaxed interaction mode
// around the calls CUDA counts as unsafe, pinned host memory (allocated,
// or supplied and registered), host functions, IPC handles and pool
// sharing, module load and kernel launch, and the error-code -> sentinel
// tables. What stays in cuda and
// hip: symbol names and versions, ABI constants, error types and their
// messages, the version rules and the open-time device checks where the
// runtimes really differ (docs/cuda-backend.md, docs/hip-backend.md).
//
// A vendor package embeds *Driver under an unexported name, so the
// exported methods here are the methods of cuda.Driver and hip.Driver:
// only the public API of both is exported as a method; what the vendor
// packages need beyond it is a package-level function (Pinned, Pool, ...).
package gpurt
