package cpu_test

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

func newDriver(t testing.TB, opts cpu.Options) *cpu.Driver {
	t.Helper()
	d, err := cpu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func isErr(t testing.TB, err error, want ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %v", want)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Fatalf("got %v, want it to wrap %v", err, w)
		}
	}
}

func val[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		ok(t, err)
		return v
	}
}

func newStream(t testing.TB, d *cpu.Driver) driver.Stream {
	t.Helper()
	return val[driver.Stream](t)(d.CreateStream())
}

// newDriverStream is a new driver with opts and a stream on it, the
// setup most tests start from.
func newDriverStream(t testing.TB, opts cpu.Options) (*cpu.Driver, driver.Stream) {
	t.Helper()
	d := newDriver(t, opts)
	return d, newStream(t, d)
}

func host(t testing.TB, d *cpu.Driver, n int64) []byte {
	t.Helper()
	return val[[]byte](t)(d.HostAlloc(n))
}

func status(t testing.TB, d *cpu.Driver, s driver.Stream) driver.CaptureStatus {
	t.Helper()
	return val[driver.CaptureStatus](t)(d.StreamCaptureStatus(s))
}

func wantStatus(t testing.TB, d *cpu.Driver, s driver.Stream, want driver.CaptureStatus) {
	t.Helper()
	if got := status(t, d, s); got != want {
		t.Fatalf("capture status %v, want %v", got, want)
	}
}

func wantBytes(t testing.TB, got []byte, want byte) {
	t.Helper()
	for i, b := range got {
		if b != want {
			t.Fatalf("byte %d is %d (first bytes %v), want all %d", i, b, head(got), want)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

func wantLive(t testing.TB, d *cpu.Driver, want int64) {
	t.Helper()
	if got := d.LiveBytes(); got != want {
		t.Fatalf("live bytes %d, want %d", got, want)
	}
}

// endInvalidated checks that the capture on s was invalidated: its status
// says so and EndCapture fails with ErrCaptureInvalidated.
func endInvalidated(t testing.TB, d *cpu.Driver, s driver.Stream) {
	t.Helper()
	wantStatus(t, d, s, driver.CaptureInvalidated)
	_, err := d.EndCapture(s)
	isErr(t, err, alloc.ErrCaptureInvalidated)
}

// wantFreedByCaller checks that p, an allocation its graph left behind,
// still holds fill in its first len(out) bytes and is the caller's to
// free: freeing it releases the last live bytes.
func wantFreedByCaller(t testing.TB, d *cpu.Driver, s driver.Stream, p driver.DevicePtr, out []byte, fill byte) {
	t.Helper()
	ok(t, d.CopyDtoH(out, p, s))
	wantBytes(t, out, fill)
	ok(t, d.FreeAsync(p, s))
	ok(t, d.StreamSynchronize(s))
	wantLive(t, d, 0)
}
