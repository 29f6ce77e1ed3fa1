package backends_test

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu"
	"github.com/stretchr/testify/require"
)

func TestUnknownBackendListsKnownOnes(t *testing.T) {
	_, err := backends.OpenDriver("no-such-gpu")
	require.Error(t, err)
	require.True(t, errors.Is(err, alloc.ErrBackendUnavailable))
	require.Contains(t, err.Error(), "cpu")
}

func TestCPURegisteredAndOpens(t *testing.T) {
	require.Contains(t, backends.Names(), "cpu")
	d, err := backends.OpenDriver("cpu")
	require.NoError(t, err)
	require.Equal(t, "cpu", d.Name())
	require.NoError(t, d.Close())
}

func TestRegisterRejectsDuplicates(t *testing.T) {
	require.Panics(t, func() { backends.Register("cpu", func() (alloc.Driver, error) { return nil, nil }) })
}
