package kernels

import (
	"encoding/binary"
	"math"
	"testing"
)

// Each parameter struct encodes every field at its offset in the source's
// struct (little-endian, natural alignment), padding zeroed over a dirty
// buffer, and returns exactly the struct's bytes.
func TestEncodeLaysOutTheSourceStructs(t *testing.T) {
	coll := Coll{Table: 1, InOff: 2, OutOff: 3, Count: 4, TimeoutTicks: 5, Rank: 6, NRanks: 7, DType: 8, Sig: 9}
	collWant := []field{{0, 8, 1}, {8, 8, 2}, {16, 8, 3}, {24, 8, 4}, {32, 8, 5}, {40, 4, 6}, {44, 4, 7}, {48, 4, 8}, {52, 4, 9}}
	for _, tc := range []struct {
		name   string
		encode func([]byte) []byte
		size   int
		want   []field
	}{
		{"ca_coll", coll.Encode, CollSize, collWant},
		{"ca_p2p", (&P2P{Coll: coll, Peer: 10, Slot: 11, Value: 12}).Encode, P2PSize,
			append(collWant[:len(collWant):len(collWant)], field{56, 4, 10}, field{60, 4, 11}, field{64, 4, 12}, field{68, 4, 0})},
		{"ca_a2av", (&AllToAllVArgs{Coll: coll, OutBytes: 10, SendOff: 11, RecvOff: 12}).Encode, AllToAllVSize,
			append(collWant[:len(collWant):len(collWant)], field{56, 8, 10}, field{64, 8, 11}, field{72, 8, 12})},
		{"ca_axpy", (&AxpyArgs{X: 1, Y: 2, N: 3, A: 1.5}).Encode, AxpySize,
			[]field{{0, 8, 1}, {8, 8, 2}, {16, 8, 3}, {24, 4, uint64(math.Float32bits(1.5))}, {28, 4, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.size+8)
			for i := range buf {
				buf[i] = 0xee
			}
			b := tc.encode(buf)
			if len(b) != tc.size {
				t.Fatalf("encoded %d bytes, want %d", len(b), tc.size)
			}
			end := 0
			for _, f := range tc.want {
				var got uint64
				if f.width == 8 {
					got = binary.LittleEndian.Uint64(b[f.off:])
				} else {
					got = uint64(binary.LittleEndian.Uint32(b[f.off:]))
				}
				if got != f.val {
					t.Errorf("offset %d: %#x, want %#x", f.off, got, f.val)
				}
				end = f.off + f.width
			}
			if end != tc.size {
				t.Errorf("fields end at %d, struct is %d bytes", end, tc.size)
			}
		})
	}
}

// field is a value the encoding must hold at off, width bytes wide.
type field struct {
	off, width int
	val        uint64
}
