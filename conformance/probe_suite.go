package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/probe"
)

// probeSuite runs the capture probe matrix in every mode and requires every
// row to give the verdict CUDA's rules give (probe.Run itself proves each
// CAPTURABLE row by fresh-data replays).
func probeSuite(t *testing.T, open Factory) {
	inEachMode(func(t *testing.T, mode alloc.CaptureMode) {
		drv := open(t)
		rows, err := probe.Run(drv, mode, 10)
		require.NoError(t, err)
		require.Len(t, rows, len(probe.OpsFor(drv)))
		for _, r := range rows {
			want := probe.ExpectedFor(drv.Info(), r.Op, mode)
			assert.Equal(t, want, r.Verdict, "%s/%s: %s", mode, r.Op, r.Error)
			if r.Verdict == probe.NotCapturable {
				assert.NotEmpty(t, r.Error, "%s/%s: a refusal must say why", mode, r.Op)
			}
		}
	})(t)
}
