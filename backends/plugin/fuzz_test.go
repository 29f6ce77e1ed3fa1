package plugin

import (
	"context"
	"encoding/binary"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// The host's reply decoder never panics on what a child sends, and the
// device info it takes from an Open reply is what checkInfo let through: a
// power-of-two alignment, a valid UTF-8 name. Seeds: the f.Add calls and
// testdata/fuzz/FuzzDecodeReply.
func FuzzDecodeReply(f *testing.F) {
	ok := &enc{b: []byte{replyOK}}
	ok.u64(1).u64(0).u64(0).str("cpu").str("cpu").str("cpu (emulated)").i64(4 << 30).i64(256).bool(true).u64(1)
	f.Add(ok.b)
	bad := &enc{b: []byte{replyErr}}
	bad.u64(0).u64(1).u64(uint64(opMemsetAsync)).u64(7)
	encodeErr(bad, alloc.ErrOutOfMemory)
	encodeErr(bad, alloc.ErrInvalidValue)
	f.Add(bad.b)
	f.Add([]byte{replyOK, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReply(b)
		if r == nil {
			require.Error(t, err)
			return
		}
		for _, a := range r.async {
			require.Error(t, a)
		}
		if err != nil {
			return
		}
		r.str()
		r.str()
		info := driver.DeviceInfo{Name: r.str(), TotalMemory: r.i64(), Alignment: r.i64(), UnifiedMemory: r.bool()}
		r.u64()
		if r.err != nil || checkInfo(&info) != nil {
			return
		}
		require.NoError(t, driver.CheckAlignment(info.Alignment))
		require.True(t, utf8.ValidString(info.Name))
		require.LessOrEqual(t, len(info.Name), maxDeviceName+len("\uFFFD"))
	})
}

// The child's request handler never panics on what a host sends: each
// input is one request (after no batches) to a fresh server with cpu open.
// Seeds: the f.Add calls and testdata/fuzz/FuzzChildRequest.
func FuzzChildRequest(f *testing.F) {
	f.Add(byte(opMalloc), (&enc{}).i64(4096).b)
	f.Add(byte(opHostAlloc), (&enc{}).i64(4096).b)
	f.Add(byte(opCopyHtoD), (&enc{}).u64(1).u64(1).i64(0).i64(16).u64(0).b)
	f.Add(byte(opBatch), append((&enc{}).u64(2).b, byte(opMemsetAsync), 0, 0, 10, 0, byte(opFreeAsync), 0, 0, byte(opStreamSynchronize), 0))
	f.Add(byte(opDirectSpan), (&enc{}).u64(0).i64(1).u64(0).b)
	f.Add(byte(opOpen), (&enc{}).str("cpu").u64(0).b)
	f.Add(byte(200), []byte{})
	f.Fuzz(func(t *testing.T, op byte, args []byte) {
		s := newServer()
		open := newReq(opOpen).str("cpu").u64(1).str("memory_limit").str("16MiB")
		if _, err := decodeReply(s.call(context.Background(), append(binary.AppendUvarint(nil, 0), open.b...))); err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.leases.mu.Lock()
			held := s.leases.held
			s.leases.held = nil
			s.leases.mu.Unlock()
			for _, release := range held {
				release()
			}
			s.closeAll()
			for _, r := range s.regions.byID {
				_ = r.release()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req := append(binary.AppendUvarint(nil, 0), op)
		rep := s.call(ctx, append(req, args...))
		_, _ = decodeReply(rep) // a reply the host can read, whatever it says
		require.NotEmpty(t, rep)
	})
}
