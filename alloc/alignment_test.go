package alloc_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// infoDriver is a driver that reports a forged device alignment.
type infoDriver struct {
	driver.Driver
	alignment int64
}

func (d infoDriver) Info() driver.DeviceInfo {
	i := d.Driver.Info()
	i.Alignment = d.alignment
	return i
}

// New refuses a driver whose alignment is not a power of two of sane size
// (a plugin child is not trusted to report one): MaxInt64 used to overflow
// the pool's rounding and spin New forever, 3 to round sizes wrong.
func TestNewRefusesBadAlignment(t *testing.T) {
	d := newCPU(t, 0)
	for _, al := range []int64{0, -256, 3, 768, driver.MaxAlignment << 1, math.MaxInt64, math.MinInt64} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		done := make(chan error, 1)
		go func() {
			a, err := alloc.New(infoDriver{d, al}, alloc.Options{})
			if err == nil {
				_ = a.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, driver.ErrDriver, "alignment %d", al)
		case <-ctx.Done():
			t.Fatalf("alloc.New with alignment %d did not return", al)
		}
		cancel()
	}
	for _, al := range []int64{1, 256, driver.MaxAlignment} {
		a, err := alloc.New(infoDriver{d, al}, alloc.Options{})
		require.NoError(t, err, "alignment %d", al)
		require.NoError(t, a.Close())
	}
}
