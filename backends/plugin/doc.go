// Package plugin runs a capalloc backend in its own process, through
// hashicorp/go-plugin over gRPC, so that a driver call that hangs or crashes
// takes down only the backend process, never the engine.
//
// Importing the package registers the "plugin" scheme with backends:
//
//	plugin:cpu                          backend "cpu" in a child process
//	plugin:cpu:memory_limit=1GiB        options without the plugin. prefix go to the backend
//	plugin:/opt/capalloc/capalloc-plugin:plugin.backend=cpu
//
// The host side is an driver.Driver, so alloc and the conformance suite run
// over it unchanged. Options for the host (prefix "plugin."):
//
//	plugin.sha256=HEX          the binary must have this SHA-256 (hashed and executed through one descriptor)
//	plugin.call_timeout=60s    deadline of each call; past it the process is killed (ErrBackendHung)
//	plugin.start_timeout=30s   deadline for starting the process and the handshake
//	plugin.backend=NAME        the backend a binary given by path serves (default: its only one)
//
// The binary for plugin:NAME is, in order: $CAPALLOC_PLUGIN; the running
// program itself when it called ServeIfChild (so a test binary serves its
// own plugins); capalloc-plugin next to the running program; capalloc-plugin
// on $PATH. Pinned host memory and copy staging live in shared memory
// (memfd) both processes map: no bulk data crosses the RPC pipe. See
// docs/plugin-mode.md.
//
// Trust: the config string picks a program to execute (a path, or
// $CAPALLOC_PLUGIN), so it must come from whoever may run programs as the
// engine; plugin.sha256 pins the file. The child itself is not trusted not
// to crash or misbehave: its shared memory must be memfds sealed against
// shrinking, its device info is validated, and its replies are checked
// against what the host mapped (docs/security.md).
//
// Errors: every call after the backend process died fails with an error
// wrapping driver.ErrBackendCrashed (with the exit status), or
// driver.ErrBackendHung when the host killed it on a deadline. Reopen the
// backend with backends.OpenString, or move to the next choice of the chain.
//
// The host answers StreamCaptureStatus itself, from the backend's own
// status carried by every reply, and, outside captures, sends
// stream-ordered calls with no result (MemsetAsync, CopyDtoDAsync,
// FreeAsync, GraphLaunch, async copies with a host buffer) without waiting,
// in order, in batches. Such a call's failure is an *AsyncError returned
// by the next StreamSynchronize, StreamQuery, blocking copy or
// DestroyStream on its stream.
//
// Plugin mode needs Linux (memfd, Pdeathsig); elsewhere Open says so with
// driver.ErrBackendUnavailable.
//
// Host functions cannot cross into the backend's process: the host Driver
// does not implement driver.HostFuncLauncher, so Allocator.LaunchHostFunc
// (and symheap's collectives, which are host functions) fail with an error
// wrapping errors.ErrUnsupported before any call to the child.
//
// Files: host_*.go run in the engine's process (the Driver, starting and
// watching the child, mapping shared memory, staging, direct copies,
// capture tracking, the pipeline); child_*.go in the backend's process
// (serving the backend driver, its shared regions, direct spans, the
// capture view, batch order and kept failures); service.go and wire.go are
// the protocol both sides speak.
package plugin
