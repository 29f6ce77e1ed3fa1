package symheap_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/symheap"
)

// What a peer sends at open is checked before it is used
// (docs/symmetric-heap.md, "What a peer may send"): a bad export message
// fails every rank's open with ErrPeerOpen naming the rank and the field,
// before any rank enables peer access with it or maps it, and every rank
// frees what it allocated.

// tamperExchange is an exchange whose round round hands every rank the
// messages as edit leaves them (the same edit for every rank).
type tamperExchange struct {
	symheap.Exchange
	round int
	edit  func(msgs [][]byte)

	mu   sync.Mutex
	next map[int]int
}

func (x *tamperExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	x.mu.Lock()
	k := x.next[rank]
	x.next[rank]++
	x.mu.Unlock()
	msgs, err := x.Exchange.AllGather(rank, msg, timeout)
	if err == nil && k == x.round {
		x.edit(msgs)
	}
	return msgs, err
}

// The export message after its status byte: size, process token,
// allocation id, base, device ordinal, then the IPC handle.
const (
	exportMemID  = 1 + 24
	exportBase   = 1 + 32
	exportDevice = 1 + 40
	exportHandle = 1 + 48
)

func TestFakeBadExportRefusedBeforeEnabling(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		edit func(msgs [][]byte) // rank 1's export, as every rank receives it
		want string
	}{
		{"ordinal of another device", func(m [][]byte) { le.PutUint64(m[1][exportDevice:], 3) },
			"rank 1's export: device ordinal 3 for allocation"},
		{"ordinal past any device", func(m [][]byte) { le.PutUint64(m[1][exportDevice:], 1<<40) },
			"rank 1's export: device ordinal 1099511627776 (want -1 to"},
		{"ordinal below -1", func(m [][]byte) { le.PutUint64(m[1][exportDevice:], uint64(1<<64-7)) },
			"rank 1's export: device ordinal -7"},
		{"allocation this process never made", func(m [][]byte) { le.PutUint64(m[1][exportMemID:], 1<<60) },
			"which holds none such"},
		{"another rank's allocation", func(m [][]byte) { copy(m[1][exportMemID:exportMemID+8], m[0][exportMemID:]) },
			"which is rank 0's"},
		{"base not the allocation's", func(m [][]byte) { le.PutUint64(m[1][exportBase:], le.Uint64(m[1][exportBase:])+256) },
			"rank 1's export: allocation"},
		{"handle cut short", func(m [][]byte) { m[1] = m[1][:len(m[1])-1] },
			"rank 1's export: an IPC handle of 63 B, this rank's driver's are 64 B"},
		{"no handle", func(m [][]byte) { m[1] = m[1][:exportHandle] },
			"rank 1's export: an IPC handle of 0 B"},
		{"unknown status", func(m [][]byte) { m[1][0] = 7 },
			"rank 1 sent a message of unknown status 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
				t.Setenv(v.env+"DEVICES", "4")
				x := &tamperExchange{Exchange: symheap.NewLocalExchange(2), edit: c.edit, next: map[int]int{}}
				w, errs := openTopoVia(t, v, []int{0, 1}, 5*time.Second, nil, x)
				for r, err := range errs {
					require.ErrorIs(t, err, symheap.ErrPeerOpen, "rank %d", r)
					require.Nil(t, w.heaps[r])
					require.Zero(t, w.as[r].Stats().LiveBuffers, "rank %d freed its heap", r)
				}
				require.Empty(t, gpurttest.Find(log.Lines(), "dev=0 ", "PeerAccess"), "rank 0 queried or enabled peer access with rank 1's export")
				require.Empty(t, gpurttest.Find(log.Lines(), "IpcOpenMemHandle"), "nothing mapped through IPC")
				require.ErrorContains(t, errs[0], c.want)
			})
		})
	}
}

// A rank's own export that comes back changed is refused too: its own
// handle length is what it holds every peer's to.
func TestFakeOwnExportChangedRefused(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		x := &tamperExchange{Exchange: symheap.NewLocalExchange(2), edit: func(m [][]byte) { m[0] = m[0][:len(m[0])-1] }, next: map[int]int{}}
		w, errs := openTopoVia(t, v, []int{0, 0}, 5*time.Second, nil, x)
		require.ErrorIs(t, errs[0], symheap.ErrPeerOpen)
		require.ErrorContains(t, errs[0], "rank 0: rank 0's export: it came back from the exchange changed")
		for r, err := range errs {
			require.ErrorIs(t, err, symheap.ErrPeerOpen, "rank %d", r)
			require.Zero(t, w.as[r].Stats().LiveBuffers, "rank %d freed its heap", r)
		}
	})
}

// A rank's device description (the confirm round) that no real device
// sends fails every rank's open with ErrPeerOpen naming the rank and the
// field, not a grid computed from it.
func TestFakeBadDeviceDescriptionRefused(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte // rank 1's confirm message
		want string
	}{
		{"negative multiprocessors", func(b []byte) []byte { le.PutUint64(b[1+3+16:], uint64(1<<64-1)); return b },
			"rank 1's device: symheap: peer heap not opened: a device description of"},
		{"blocks that overflow", func(b []byte) []byte {
			le.PutUint64(b[1+3+8:], 1<<32)
			le.PutUint64(b[1+3+16:], 1<<32)
			return b
		}, "blocks per multiprocessor is 4294967296"},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, "1 B past its end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
				x := &tamperExchange{Exchange: symheap.NewLocalExchange(2), round: 1, edit: func(m [][]byte) { m[1] = c.edit(m[1]) }, next: map[int]int{}}
				w, errs := openTopoVia(t, v, []int{0, 0}, 5*time.Second, nil, x)
				for r, err := range errs {
					require.ErrorIs(t, err, symheap.ErrPeerOpen, "rank %d", r)
					require.ErrorContains(t, err, c.want, "rank %d", r)
					require.Nil(t, w.heaps[r])
					require.Zero(t, w.as[r].Stats().LiveBuffers, "rank %d freed its heap", r)
				}
			})
		})
	}
}

// A counts error record in the pad that capalloc_alltoallv does not write
// (ranks past the heap's, a count that is not past its room) is reported
// as the driver's fault, not as counts a rank never sent, and cleared:
// the heap stays usable.
func TestFakeCorruptCountsRecordRefused(t *testing.T) {
	record := symheap.CountsRecord
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		w := openTopoOK(t, v, []int{0, 0}, 5*time.Second, nil)
		h := w.heaps[0]
		for _, c := range []struct {
			rec  []byte
			want string
		}{
			{record(kernels.CountsPastSend, 7, 0, 10, 4), "sender 7, receiver 0 of 2 ranks"},
			{record(kernels.CountsPastRecv, 0, 1, 3, 4), "count 3 recorded as past a room of 4"},
			{record(kernels.CountsNegative, 0, 1, 5, 0), "count 5 recorded as negative"},
			{record(kernels.CountsPastSend, 0, 1, 5, -1), "room left -1"},
		} {
			require.NoError(t, w.as[0].Upload(h.Buffer(), kernels.PadCountsErrOff, c.rec))
			err := h.Synchronize()
			require.ErrorIs(t, err, driver.ErrDriver)
			require.NotErrorIs(t, err, symheap.ErrCountsOutOfRange)
			require.ErrorContains(t, err, c.want)
			require.NoError(t, h.Synchronize(), "the record was cleared: the heap stays usable")
		}
		require.NoError(t, w.as[0].Upload(h.Buffer(), kernels.PadCountsErrOff, record(kernels.CountsPastRecv, 1, 0, 9, 4)))
		require.ErrorIs(t, h.Synchronize(), symheap.ErrCountsOutOfRange, "a record the kernel writes")
	})
}
