package symheap_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/symheap"
)

// The half conversions are the kernels' arithmetic (ca_h2f, ca_f2h,
// ca_bf2f, ca_f2bf): every backend must round a sum the same way.
func TestHalfConversionsRoundToNearestEven(t *testing.T) {
	p := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{p(-24), 0x0001}, {p(-25), 0x0000}, {3 * p(-25), 0x0002}, {p(-14), 0x0400},
		{1 + p(-11), 0x3c00}, {1 + 3*p(-11), 0x3c02}, {1 + p(-11) + p(-20), 0x3c01},
		{float32(math.Copysign(0, -1)), 0x8000},
	} {
		require.Equal(t, c.want, symheap.Float32ToF16(c.f), "float16 of %g", c.f)
	}
	nan := symheap.Float32ToF16(float32(math.NaN()))
	require.True(t, nan&0x7c00 == 0x7c00 && nan&0x3ff != 0, "NaN stays NaN: %#x", nan)
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80}, {1 + p(-8), 0x3f80}, {1 + 3*p(-8), 0x3f82}, {-3.5, 0xc060}, {float32(math.Inf(1)), 0x7f80},
	} {
		require.Equal(t, c.want, symheap.Float32ToBF16(c.f), "bfloat16 of %g", c.f)
	}
	require.True(t, math.IsNaN(float64(symheap.BF16ToFloat32(symheap.Float32ToBF16(float32(math.NaN()))))))
	// Every half survives the round trip through float32.
	for h := range 1 << 16 {
		f := symheap.F16ToFloat32(uint16(h))
		if f != f {
			continue
		}
		require.Equal(t, uint16(h), symheap.Float32ToF16(f), "float16 %#04x (%g)", h, f)
		b := symheap.BF16ToFloat32(uint16(h))
		if b == b {
			require.Equal(t, uint16(h), symheap.Float32ToBF16(b), "bfloat16 %#04x", h)
		}
	}
}
