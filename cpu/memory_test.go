package cpu_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

func TestMemoryLimit(t *testing.T) {
	const limit = 1 << 20
	d := newDriver(t, cpu.Options{MemoryLimit: limit})
	if d.Info().TotalMemory != limit {
		t.Fatalf("total memory %d", d.Info().TotalMemory)
	}
	s := newStream(t, d)
	p := val[driver.DevicePtr](t)(d.Malloc(limit))
	_, err := d.Malloc(1)
	isErr(t, err, alloc.ErrOutOfMemory)
	_, err = d.MallocAsync(1, s)
	isErr(t, err, alloc.ErrOutOfMemory)
	ok(t, d.Free(p))

	// Sizes far past the limit fail before any Go memory is requested.
	for _, n := range []int64{1 << 40, 1 << 41, 1<<63 - 1} {
		_, err = d.Malloc(n)
		isErr(t, err, alloc.ErrOutOfMemory)
		_, err = d.HostAlloc(n)
		isErr(t, err, alloc.ErrOutOfMemory)
	}

	// Graph memory counts against the limit; failing to allocate in a
	// capture invalidates it.
	ok(t, d.BeginCapture(s, alloc.Relaxed))
	q := val[driver.DevicePtr](t)(d.MallocAsync(limit/2, s))
	_, err = d.Malloc(limit/2 + 256)
	isErr(t, err, alloc.ErrOutOfMemory)
	_, err = d.MallocAsync(limit, s)
	isErr(t, err, alloc.ErrOutOfMemory)
	endInvalidated(t, d, s)
	isErr(t, d.Free(q), alloc.ErrInvalidValue)
	wantLive(t, d, 0)
	p = val[driver.DevicePtr](t)(d.Malloc(limit))
	ok(t, d.Free(p))
}

func TestBadAddresses(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(1000))
	h := host(t, d, 2000)
	for name, err := range map[string]error{
		"null":           d.MemsetAsync(0, 1, 1, s),
		"unknown id":     d.MemsetAsync(p+1<<50, 1, 1, s),
		"past end":       d.MemsetAsync(p+999, 1, 2, s),
		"offset past":    d.MemsetAsync(p+1001, 1, 0, s),
		"negative":       d.MemsetAsync(p, 1, -1, s),
		"htod past end":  d.CopyHtoDAsync(p+1, h[:1000], s),
		"dtoh past end":  d.CopyDtoHAsync(h[:1001], p, s),
		"dtod src":       d.CopyDtoDAsync(p, p+500, 501, s),
		"dtod dst":       d.CopyDtoDAsync(p+500, p, 501, s),
		"blocking htod":  d.CopyHtoD(p, make([]byte, 1001), s),
		"blocking dtoh":  d.CopyDtoH(make([]byte, 1001), p, s),
		"free interior":  d.Free(p + 256),
		"free unknown":   d.Free(p + 1<<45),
		"free async 0":   d.FreeAsync(0, s),
		"host free copy": d.HostFree(make([]byte, 2000)),
		"host free part": d.HostFree(h[:1000]),
		"host free nil":  d.HostFree(nil),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			isErr(t, err, alloc.ErrInvalidValue)
		}
	}
	for _, n := range []int64{0, -1} {
		_, err := d.Malloc(n)
		isErr(t, err, alloc.ErrInvalidValue)
		_, err = d.MallocAsync(n, s)
		isErr(t, err, alloc.ErrInvalidValue)
		_, err = d.HostAlloc(n)
		isErr(t, err, alloc.ErrInvalidValue)
	}

	ok(t, d.Free(p))
	isErr(t, d.Free(p), alloc.ErrInvalidValue)
	isErr(t, d.MemsetAsync(p, 1, 1, s), alloc.ErrInvalidValue)
	q := val[driver.DevicePtr](t)(d.MallocAsync(64, s))
	ok(t, d.FreeAsync(q, s))
	isErr(t, d.FreeAsync(q, s), alloc.ErrInvalidValue) // double free, caught at the call
	isErr(t, d.Free(q), alloc.ErrInvalidValue)
	ok(t, d.HostFree(h))
	isErr(t, d.HostFree(h), alloc.ErrInvalidValue)
	ok(t, d.StreamSynchronize(s))
	wantLive(t, d, 0)
	if d.HostBytes() != 0 {
		t.Fatalf("host bytes %d", d.HostBytes())
	}
}

func TestBadHandles(t *testing.T) {
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(64))
	for _, bad := range []driver.Stream{0, 12345} {
		_, err := d.MallocAsync(64, bad)
		isErr(t, err, alloc.ErrInvalidValue)
		isErr(t, d.MemsetAsync(p, 0, 1, bad), alloc.ErrInvalidValue)
		isErr(t, d.StreamSynchronize(bad), alloc.ErrInvalidValue)
		_, err = d.StreamQuery(bad)
		isErr(t, err, alloc.ErrInvalidValue)
		_, err = d.StreamCaptureStatus(bad)
		isErr(t, err, alloc.ErrInvalidValue)
		isErr(t, d.BeginCapture(bad, alloc.Global), alloc.ErrInvalidValue)
		_, err = d.EndCapture(bad)
		isErr(t, err, alloc.ErrInvalidValue)
		isErr(t, d.DestroyStream(bad), alloc.ErrInvalidValue)
		isErr(t, d.CopyDtoH(make([]byte, 1), p, bad), alloc.ErrInvalidValue)
	}

	_, err := d.EndCapture(s)
	isErr(t, err, alloc.ErrNotCapturing)
	isErr(t, d.BeginCapture(s, alloc.CaptureMode(42)), alloc.ErrInvalidValue)
	ok(t, d.BeginCapture(s, alloc.ThreadLocal))
	isErr(t, d.BeginCapture(s, alloc.Global), alloc.ErrAlreadyCapturing)
	wantStatus(t, d, s, driver.CaptureActive) // a second begin does not spoil the first
	g := val[driver.GraphHandle](t)(d.EndCapture(s))

	_, err = d.GraphInstantiate(12345, false)
	isErr(t, err, alloc.ErrInvalidValue)
	isErr(t, d.GraphLaunch(12345, s), alloc.ErrInvalidValue)
	isErr(t, d.GraphLaunch(driver.GraphExec(g), s), alloc.ErrInvalidValue) // a graph is not an exec
	e := val[driver.GraphExec](t)(d.GraphInstantiate(g, false))
	ok(t, d.GraphExecDestroy(e))
	isErr(t, d.GraphExecDestroy(e), alloc.ErrInvalidValue)
	isErr(t, d.GraphLaunch(e, s), alloc.ErrInvalidValue)
	ok(t, d.GraphDestroy(g))
	isErr(t, d.GraphDestroy(g), alloc.ErrInvalidValue)
	_, err = d.GraphInstantiate(g, false)
	isErr(t, err, alloc.ErrInvalidValue)
	isErr(t, d.GraphDestroy(12345), alloc.ErrInvalidValue)
}

func TestClose(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	ok(t, err)
	s := newStream(t, d)
	p := val[driver.DevicePtr](t)(d.MallocAsync(64, s))
	h := host(t, d, 64)
	ok(t, d.MemsetAsync(p, 1, 64, s))
	ok(t, d.BeginCapture(s, alloc.Global))
	ok(t, d.Close())
	if d.LiveBytes() != 0 || d.HostBytes() != 0 {
		t.Fatalf("after close: %d device, %d host bytes", d.LiveBytes(), d.HostBytes())
	}

	calls := map[string]error{"close": d.Close()}
	_, calls["create stream"] = d.CreateStream()
	calls["destroy stream"] = d.DestroyStream(s)
	calls["synchronize"] = d.StreamSynchronize(s)
	_, calls["query"] = d.StreamQuery(s)
	_, calls["status"] = d.StreamCaptureStatus(s)
	_, calls["malloc"] = d.Malloc(64)
	calls["free"] = d.Free(p)
	_, calls["malloc async"] = d.MallocAsync(64, s)
	calls["free async"] = d.FreeAsync(p, s)
	_, calls["host alloc"] = d.HostAlloc(64)
	calls["host free"] = d.HostFree(h)
	calls["htod async"] = d.CopyHtoDAsync(p, h, s)
	calls["dtoh async"] = d.CopyDtoHAsync(h, p, s)
	calls["dtod async"] = d.CopyDtoDAsync(p, p, 1, s)
	calls["memset"] = d.MemsetAsync(p, 0, 1, s)
	calls["htod"] = d.CopyHtoD(p, h, s)
	calls["dtoh"] = d.CopyDtoH(h, p, s)
	calls["begin capture"] = d.BeginCapture(s, alloc.Global)
	_, calls["end capture"] = d.EndCapture(s)
	_, calls["instantiate"] = d.GraphInstantiate(1, false)
	calls["launch"] = d.GraphLaunch(1, s)
	calls["exec destroy"] = d.GraphExecDestroy(1)
	calls["graph destroy"] = d.GraphDestroy(1)
	for name, err := range calls {
		if err == nil {
			t.Errorf("%s after close: no error", name)
		} else {
			isErr(t, err, alloc.ErrClosed)
		}
	}
}

// A memset writes exactly its range, with its value, at every length and
// offset around the row fill copies before it doubles (ops.go).
func TestMemsetLengths(t *testing.T) {
	const size = 2048
	d, s := newDriverStream(t, cpu.Options{})
	p := val[driver.DevicePtr](t)(d.Malloc(size))
	got := make([]byte, size)
	for _, off := range []int64{0, 1, 7, 300} {
		for _, n := range []int64{0, 1, 7, 8, 9, 255, 256, 257, 511, 512, 1000, size - 300} {
			if off+n > size {
				continue
			}
			v := byte(off + n + 1)
			ok(t, d.MemsetAsync(p, 0xee, size, s))
			ok(t, d.MemsetAsync(p+driver.DevicePtr(off), v, n, s))
			ok(t, d.CopyDtoH(got, p, s))
			for i, c := range got {
				want := byte(0xee)
				if int64(i) >= off && int64(i) < off+n {
					want = v
				}
				if c != want {
					t.Fatalf("memset %d B of %#x at offset %d: byte %d is %#x, want %#x", n, v, off, i, c, want)
				}
			}
		}
	}
}
