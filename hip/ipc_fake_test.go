package hip

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The IPC and pool-sharing paths both drivers share are tested once, for
// both, in internal/gpurt/memory_fake_test.go and
// internal/gpurt/shared_fake_test.go;
// here, what only HIP does: the open's flag follows the runtime's version.

// ROCm 5.x's header defines hipIpcMemLazyEnablePeerAccess as 0.
func TestFakeIPCFlagsOn56(t *testing.T) {
	t.Setenv("FAKE_HIP_VERSION", "50600000")
	d, log := openFake(t, Options{})
	p, err := d.Malloc(64)
	require.NoError(t, err)
	h, err := d.IPCGetMemHandle(p)
	require.NoError(t, err)
	q, err := d.IPCOpenMemHandle(h)
	require.NoError(t, err)
	require.Len(t, gpurttest.Find(log.Lines(), "hipIpcOpenMemHandle", "flags=0"), 1)
	require.NoError(t, d.IPCCloseMemHandle(q))
}
