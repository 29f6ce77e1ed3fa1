package hip

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// mmapHost is a backends.HostMemory of anonymous mappings (outside the Go
// heap, like the plugin server's memfd regions) that counts what it holds.
type mmapHost struct {
	mu   sync.Mutex
	live map[*byte]int
}

func (h *mmapHost) Alloc(size int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil {
		h.live = map[*byte]int{}
	}
	h.live[&b[0]] = len(b)
	return b, nil
}

func (h *mmapHost) Free(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live[&b[0]] != len(b) {
		return errors.New("mmapHost: not ours")
	}
	delete(h.live, &b[0])
	return syscall.Munmap(b)
}

func (h *mmapHost) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

func TestFakeSuppliedHostMemoryIsRegistered(t *testing.T) {
	hm := &mmapHost{}
	d, log := openFake(t, Options{HostMemory: hm})
	log.lines()
	b, err := d.HostAlloc(8192)
	require.NoError(t, err)
	require.Equal(t, 1, hm.held(), "the memory is the source's")
	lines := log.lines()
	require.Len(t, find(lines, "hipHostRegister", "n=8192 flags=1"), 1, "pinned with hipHostRegisterPortable: %v", lines)
	require.Empty(t, find(lines, "hipHostMalloc"))
	require.True(t, gpurt.Pinned(d.core, b), "async copies accept it")

	s, err := d.CreateStream()
	require.NoError(t, err)
	p, err := d.MallocAsync(8192, s)
	require.NoError(t, err)
	for i := range b {
		b[i] = byte(i)
	}
	require.NoError(t, d.CopyHtoDAsync(p, b, s))
	out, err := d.HostAlloc(8192)
	require.NoError(t, err)
	require.NoError(t, d.CopyDtoHAsync(out, p, s))
	require.NoError(t, d.StreamSynchronize(s))
	require.Equal(t, b, out)

	require.NoError(t, d.HostFree(b))
	require.Len(t, find(log.lines(), "hipHostUnregister"), 1)
	require.Equal(t, 1, hm.held(), "given back to the source")
	require.ErrorIs(t, d.HostFree(b), alloc.ErrInvalidValue, "a second free is refused")
	require.NoError(t, d.FreeAsync(p, s))
	require.NoError(t, d.DestroyStream(s))

	// Close gives back what is still held.
	require.NoError(t, d.Close())
	require.NoError(t, d.WaitClosed(t.Context()))
	require.Zero(t, hm.held())
}

func TestFakeSuppliedHostMemoryGivenBackOnRegisterFailure(t *testing.T) {
	hm := &mmapHost{}
	d, _ := openFake(t, Options{HostMemory: hm})
	t.Setenv("FAKE_HIP_FAIL", "hipHostRegister:2")
	_, err := d.HostAlloc(4096)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "hipHostRegister: out of memory (hipErrorOutOfMemory, 2)")
	require.Zero(t, hm.held(), "nothing kept after a failed registration")
	require.Zero(t, gpurt.HostBuffers(d.core))
}
