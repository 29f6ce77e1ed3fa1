package plugin

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// A child whose device reads pageable memory (cpu's gb10 profile) reads
// its own process's memory, not the engine's: the host reports no
// pageable access, so MapHost asks for a registration, which plugin mode
// refuses, instead of returning the engine's address with no driver call.
func TestPageableAccessStaysInTheChild(t *testing.T) {
	d, err := backends.OpenDriver(context.Background(), "plugin:cpu:profile=gb10")
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.False(t, d.Info().PageableMemoryAccess)
	require.False(t, d.Info().HostPageTables)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	_, err = a.Host().MapHost(make([]byte, 4096))
	require.True(t, errors.Is(err, errors.ErrUnsupported), "MapHost through a plugin: %v", err)
}
