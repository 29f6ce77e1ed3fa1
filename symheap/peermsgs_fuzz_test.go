package symheap

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/kernels"
)

// The decoders of what peers send never panic; what they accept is within
// the bounds the heap relies on and re-encodes to the same bytes. Seeds:
// the f.Add calls (real encodings) and testdata/fuzz.

func FuzzDecodeRankDevice(f *testing.F) {
	f.Add(realDevice().encode())
	noQuery := realDevice()
	noQuery.occupancy, noQuery.perSM, noQuery.perSMAligned, noQuery.id = false, 1, 1, ""
	f.Add(noQuery.encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeRankDevice(b)
		if err != nil {
			require.ErrorIs(t, err, ErrPeerOpen)
			return
		}
		require.Equal(t, len(b) > 0, d.runs)
		require.True(t, bytes.Equal(b, d.encode()), "what decodes re-encodes to the same bytes")
		if !d.runs {
			return
		}
		require.NoError(t, checkRankDeviceWords(d.words(), d.occupancy))
		require.LessOrEqual(t, d.resident(), maxBlocksPerSM*maxMultiprocessors)
		require.GreaterOrEqual(t, d.resident(), 0)
		require.LessOrEqual(t, len(d.id), maxDeviceIDLen)
		if _, err := coResidentGrid([]rankDevice{d, d}); err != nil {
			require.ErrorIs(t, err, ErrNotCoResident)
		}
	})
}

func FuzzDecodeExport(f *testing.F) {
	f.Add(realExport().encode())
	cpu := realExport()
	cpu.device = -1
	f.Add(cpu.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeExport(b)
		if err != nil {
			return
		}
		require.True(t, bytes.Equal(b, e.encode()), "what decodes re-encodes to the same bytes")
		require.Positive(t, e.size)
		require.GreaterOrEqual(t, e.device, -1)
		require.Less(t, e.device, maxDeviceOrdinal)
		require.NotEmpty(t, e.handle)
		require.LessOrEqual(t, len(e.handle), maxIPCHandle)
	})
}

func FuzzFirstFailure(f *testing.F) {
	f.Add(okMsg(realExport().encode()))
	f.Add(failedMsg(errors.Join(ErrPeerOpen, ErrNotCoResident)))
	f.Add([]byte{msgFailed})
	f.Fuzz(func(t *testing.T, m []byte) {
		out, err := firstFailure([][]byte{okMsg(nil), m})
		if err != nil {
			require.ErrorIs(t, err, ErrPeerOpen)
			require.True(t, utf8.ValidString(err.Error()))
			require.Less(t, len(err.Error()), maxFailureText+200)
			return
		}
		require.Equal(t, msgOK, m[0])
		require.True(t, bytes.Equal(m[1:], out[1]))
	})
}

func FuzzDecodeCountsRecord(f *testing.F) {
	rec := make([]byte, kernels.PadCountsErrBytes)
	f.Add(rec, uint8(2))
	rec = append([]byte(nil), rec...)
	rec[0], rec[4], rec[16], rec[24] = kernels.CountsPastSend, 1, 9, 4
	f.Add(rec, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, ranks uint8) {
		e, err := decodeCountsRecord(b, int(ranks))
		if err != nil || e.Status == 0 {
			return
		}
		require.Less(t, int(e.Sender), int(ranks))
		require.Less(t, int(e.Receiver), int(ranks))
		require.GreaterOrEqual(t, e.Limit, int64(0))
		if e.Status == kernels.CountsNegative {
			require.Negative(t, e.Value)
		} else {
			require.Greater(t, e.Value, e.Limit)
		}
		require.NotContains(t, countsError(0, e).Error(), "unknown counts status")
	})
}

// echoExchange is two ranks where rank 1 sends peer in every round.
type echoExchange struct{ peer []byte }

func (echoExchange) Ranks() int { return 2 }
func (x echoExchange) AllGather(_ int, msg []byte, _ time.Duration) ([][]byte, error) {
	return [][]byte{msg, x.peer}, nil
}

// fuzzKey is the job key of FuzzAuthenticatedExchange.
var fuzzKey = []byte("0123456789abcdef")

// An authenticated exchange takes only what verifies: whatever rank 1
// sends, rank 0's round ends in its messages or ErrUnauthenticated, never
// a panic. The seed is rank 1's real opening message (a nonce, tagged).
func FuzzAuthenticatedExchange(f *testing.F) {
	a := &authExchange{key: fuzzKey}
	nonce := bytes.Repeat([]byte{7}, nonceBytes)
	f.Add(append(append([]byte(nil), nonce...), a.tag(tagOpening, nil, 0, 1, nonce)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, peer []byte) {
		x, err := AuthenticatedExchange(echoExchange{peer}, fuzzKey)
		require.NoError(t, err)
		msgs, err := x.AllGather(0, []byte("rank 0"), time.Second)
		if err != nil {
			require.ErrorIs(t, err, ErrUnauthenticated)
			return
		}
		require.Equal(t, []byte("rank 0"), msgs[0])
	})
}
