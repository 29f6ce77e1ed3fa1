// Package allochooks carries package alloc's process-wide services to the
// module's packages that need them without alloc exporting them (engines
// do not call them). Each is an interface: alloc's init installs its
// implementation, and every call is a method of that interface, so "go to
// implementation" finds alloc's code. The variables are nil only in a
// program that does not link package alloc.
//
// The package sits in the base layer (docs/design.md, "Layers") because
// alloc/driver reads Domains. The other two hooks carry values of alloc's
// own types (*alloc.Allocator, alloc.Buffer), which no package below alloc
// can name: their interfaces are declared by the one package that reads
// each, above alloc, and the hook holds the value alloc installed.
package allochooks

// CaptureDomains is the process's capture domains, as alloc/driver's
// DeviceWide and AfterGlobalCaptures reach them (their documentation is
// the contract). Package alloc implements it (alloc/domain.go,
// captureDomains).
type CaptureDomains interface {
	DeviceWide(domain, op string, fn func() error) error
	AfterGlobalCaptures(domain string, fn func()) (ranNow bool)
}

// Domains is package alloc's CaptureDomains; nil without package alloc,
// where no capture can be active.
var Domains CaptureDomains

var (
	// Registry is package alloc's registry of open allocators, as the
	// views read it: a registry.Source (alloc/internal/registry declares
	// it; alloc/registry.go, registrySource, implements it).
	Registry any
	// IPC is package alloc's guarded IPC memory calls, for the symmetric
	// heap and the conformance suite: an allocipc.Calls (internal/allocipc
	// declares it; alloc/ipc.go, ipcCalls, implements it).
	IPC any
)
