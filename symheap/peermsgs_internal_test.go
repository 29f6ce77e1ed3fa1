package symheap

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/kernels"
)

// The decoders of what peers send (docs/symmetric-heap.md, "What a peer
// may send"): a rank's device description, its export message, its
// status and failure text, and the counts error record read back from
// the pad. Seeds for the fuzz targets are real encodings (testdata/fuzz).

// realDevice is a rank's description as an H200 rank of two sends it.
func realDevice() rankDevice {
	oneShotMax, _ := OneShotMaxFor("NVIDIA H200", 2)
	return rankDevice{runs: true, id: "0000:19:00.0", device: 1, perSM: 8, sms: 132, limiting: kernels.AllReduceTwoShot,
		occupancy: true, perSMAligned: 8, limitingAligned: kernels.Names[len(kernels.Names)-1], aligned: true,
		oneShotMax: oneShotMax, copyMin: copyEngineMins("NVIDIA H200", 2)}
}

// realExport is an export message as a rank sends it.
func realExport() heapExport {
	return heapExport{size: 1 << 20, token: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, memID: 3,
		base: 0x7f0000200000, device: 1, handle: []byte(strings.Repeat("h", 64))}
}

// withWord is the description b with figure i (words' order) set to v.
func withWord(b []byte, i int, v int64) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(b[3+8*i:], uint64(v))
	return b
}

func TestDecodeRankDeviceRefusesWhatNoDeviceSends(t *testing.T) {
	good := realDevice().encode()
	got, err := decodeRankDevice(good)
	require.NoError(t, err)
	require.Equal(t, realDevice(), got)
	noQuery := realDevice()
	noQuery.occupancy, noQuery.perSM, noQuery.perSMAligned = false, 1, 1
	_, err = decodeRankDevice(noQuery.encode())
	require.NoError(t, err, "without the occupancy query one block is assumed")

	flag := func(i int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = v
		return b
	}
	longID := realDevice()
	longID.id = strings.Repeat("0", maxDeviceIDLen+1)
	badKernel := realDevice()
	badKernel.limiting = "capalloc_nonesuch"
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"version", flag(0, 2), "version is 2"},
		{"occupancy flag", flag(1, 2), "occupancy flag is 2"},
		{"alignment flag", flag(2, 0xff), "alignment flag is 255"},
		{"negative ordinal", withWord(good, 0, -1), "device ordinal is -1"},
		{"huge ordinal", withWord(good, 0, 1<<40), "device ordinal is 1099511627776"},
		{"negative blocks", withWord(good, 1, -3), "blocks per multiprocessor is -3"},
		{"huge blocks", withWord(good, 1, 1<<32), "blocks per multiprocessor is 4294967296"},
		{"assumed blocks other than one", noQueryWith(2), "blocks per multiprocessor is 2 (want 1 to 1)"},
		{"no multiprocessors", withWord(good, 2, 0), "multiprocessors is 0"},
		{"negative multiprocessors", withWord(good, 2, -132), "multiprocessors is -132"},
		{"huge multiprocessors", withWord(good, 2, 1<<40), "multiprocessors is 1099511627776"},
		{"negative aligned blocks", withWord(good, 3, -1), "aligned blocks per multiprocessor is -1"},
		{"negative one-shot maximum", withWord(good, 4, -1), "one-shot maximum is -1"},
		{"huge one-shot maximum", withWord(good, 4, 1<<60), "one-shot maximum is 1152921504606846976"},
		{"negative copy-engine minimum", withWord(good, 5, -1), "AllGather copy-engine minimum is -1"},
		{"huge copy-engine minimum", withWord(good, 6, 1<<60), "AllToAll copy-engine minimum is 1152921504606846976"},
		{"long device id", longID.encode(), "device id \"000"},
		{"device id not text", withID("0000:19:00.0\x1b[2J"), `device id "0000:19:00.0\x1b[2J"`},
		{"unknown kernel", badKernel.encode(), `limiting kernel "capalloc_nonesuch"`},
		{"trailing bytes", append(append([]byte(nil), good...), 0, 0), "2 B past its end"},
		{"string cut short", good[:len(good)-1], "aligned limiting kernel cut short"},
		{"figures cut short", good[:20], "shorter than its"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeRankDevice(c.b)
			require.ErrorIs(t, err, ErrPeerOpen)
			require.ErrorContains(t, err, c.want)
		})
	}
	for i := 5; i < rankDeviceWords; i++ {
		_, err := decodeRankDevice(withWord(good, i, NoCopyEngine))
		require.NoError(t, err, "no copy-engine crossover recorded (figure %d)", i)
	}
}

// withID is a real description with bus id id.
func withID(id string) []byte {
	d := realDevice()
	d.id = id
	return d.encode()
}

// noQueryWith is a description without the occupancy query that claims
// perSM blocks per multiprocessor.
func noQueryWith(perSM int) []byte {
	d := realDevice()
	d.occupancy, d.perSM = false, perSM
	return d.encode()
}

// A bad description fails settleGrid naming the rank, and leaves the
// heap's grid as it was.
func TestSettleGridNamesTheRank(t *testing.T) {
	h := &DeviceHeap{maxGrid: 7}
	err := h.settleGrid([][]byte{realDevice().encode(), withWord(realDevice().encode(), 2, -1)})
	require.ErrorIs(t, err, ErrPeerOpen)
	require.ErrorContains(t, err, "rank 1's device: ")
	require.ErrorContains(t, err, "multiprocessors is -1")
	require.Equal(t, uint32(7), h.maxGrid)
}

func TestDecodeExportRefusesWhatNoRankSends(t *testing.T) {
	good := realExport().encode()
	got, err := decodeExport(good)
	require.NoError(t, err)
	require.Equal(t, realExport(), got)
	set := func(off int, v uint64) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint64(b[off:], v)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:exportHeader-1], "shorter than its 48 B header"},
		{"empty heap", set(0, 0), "a heap of 0 B"},
		{"negative heap", set(0, 1<<63), "a heap of -9223372036854775808 B"},
		{"ordinal below -1", set(40, uint64(1<<64-2)), "device ordinal -2"},
		{"huge ordinal", set(40, 1<<40), "device ordinal 1099511627776"},
		{"no handle", good[:exportHeader], "an IPC handle of 0 B"},
		{"huge handle", append(append([]byte(nil), good...), make([]byte, maxIPCHandle)...), "an IPC handle of 1088 B"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeExport(c.b)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestFirstFailureBoundsWhatPeersSay(t *testing.T) {
	_, err := firstFailure([][]byte{okMsg(nil), {9, 1, 'x'}})
	require.ErrorIs(t, err, ErrPeerOpen)
	require.ErrorContains(t, err, "rank 1 sent a message of unknown status 9")

	long := append([]byte{msgFailed, carriedKind(ErrNotCoResident)}, strings.Repeat("é", maxFailureText)...)
	long = append(long, 0xff)
	_, err = firstFailure([][]byte{okMsg(nil), long})
	require.ErrorIs(t, err, ErrPeerOpen)
	require.ErrorIs(t, err, ErrNotCoResident, "the carried sentinel survives")
	require.Less(t, len(err.Error()), maxFailureText+200)
	require.True(t, strings.HasSuffix(err.Error(), " … (4097 B more)"), "%.60q", err.Error()[len(err.Error())-60:])
	require.NotContains(t, err.Error(), "\xff")

	out, err := firstFailure([][]byte{okMsg([]byte("a")), okMsg(nil)})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a"), {}}, out)
}

func TestDecodeCountsRecord(t *testing.T) {
	rec := countsRecord
	for _, ok := range [][]byte{
		make([]byte, kernels.PadCountsErrBytes),
		rec(kernels.CountsNegative, 1, 0, -1, 4),
		rec(kernels.CountsPastSend, 0, 1, 5, 4),
		rec(kernels.CountsPastRecv, 1, 1, 1<<62, 0),
	} {
		_, err := decodeCountsRecord(ok, 2)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{rec(kernels.CountsPastSend, 0, 1, 5, 4)[:31], "a record of 31 B"},
		{rec(4, 0, 0, 0, 0), "status 4"},
		{rec(kernels.CountsPastSend, 2, 0, 5, 4), "sender 2, receiver 0 of 2 ranks"},
		{rec(kernels.CountsPastRecv, 0, 1<<31, 5, 4), "receiver 2147483648"},
		{rec(kernels.CountsNegative, 0, 0, 0, 4), "count 0 recorded as negative"},
		{rec(kernels.CountsPastSend, 0, 0, 4, 4), "count 4 recorded as past a room of 4"},
		{rec(kernels.CountsPastRecv, 0, 0, -5, 4), "count -5 recorded as past"},
		{rec(kernels.CountsPastSend, 0, 0, 5, -4), "room left -4"},
	} {
		_, err := decodeCountsRecord(c.b, 2)
		require.ErrorContains(t, err, c.want)
	}
}

// countsRecord is a counts error record as the kernel lays it out
// (kernels.PadCountsErrOff's comment).
func countsRecord(status, sender, receiver uint32, value, limit int64) []byte {
	b := make([]byte, kernels.PadCountsErrBytes)
	le := binary.LittleEndian
	le.PutUint32(b, status)
	le.PutUint32(b[4:], sender)
	le.PutUint32(b[8:], receiver)
	le.PutUint64(b[16:], uint64(value))
	le.PutUint64(b[24:], uint64(limit))
	return b
}
