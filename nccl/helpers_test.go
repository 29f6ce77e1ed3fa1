package nccl_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
)

// inDomain is a cpu driver, with all its methods (host functions,
// polling), in a GPU driver's capture domain, so a Global capture on it
// stands for one on that GPU in this process.
type inDomain struct {
	*cpu.Driver
	domain string
}

func (d inDomain) CaptureDomain() string { return d.domain }

// domainAllocator is an allocator with opts on a cpu driver in domain.
// Both are closed when the test ends, without error (the allocator may
// have been closed by the test: ErrClosed then).
func domainAllocator(t *testing.T, domain string, opts alloc.Options) *alloc.Allocator {
	t.Helper()
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return alloctest.New(t, inDomain{d, domain}, opts)
}
