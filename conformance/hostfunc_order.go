package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// hostFuncOrderedWithCopies: a host function sees what the copies queued
// before it wrote into pinned memory, and the copies queued after it see
// what it wrote, eagerly and at every replay of a capture, with inputs
// changed between replays. This is what lets an engine's host work (and
// the cpu backend's collectives) sit between device operations.
func (s *suite) hostFuncOrderedWithCopies(t *testing.T) {
	e := s.env(t)
	if _, ok := e.drv.(driver.HostFuncLauncher); !ok {
		require.ErrorIs(t, e.a.LaunchHostFunc(func() error { return nil }), errors.ErrUnsupported, "a backend without host functions must say so")
		return
	}
	const n = 4096
	a := e.a
	buf := mustAlloc(t, a, n)
	defer func() { require.NoError(t, a.Free(buf)) }()
	hbs := make([]*alloc.HostBuffer, 3) // in, mid (host function's input), out
	for i := range hbs {
		h, err := a.HostAlloc(n)
		require.NoError(t, err)
		defer func() { require.NoError(t, h.Close()) }()
		hbs[i] = h
	}
	in, mid, out := hbs[0], hbs[1], hbs[2]
	var hostErr error
	step := func() error {
		if err := a.UploadHost(buf, 0, in, 0, n); err != nil {
			return err
		}
		if err := a.DownloadHost(mid, 0, buf, 0, n); err != nil {
			return err
		}
		if err := a.LaunchHostFunc(func() error {
			// mid holds in's bytes by now; write their complement back.
			if !bytes.Equal(mid.Bytes(), in.Bytes()) {
				hostErr = fmt.Errorf("the host function ran before the copies queued ahead of it")
				return hostErr
			}
			for i, v := range mid.Bytes() {
				mid.Bytes()[i] = ^v
			}
			return nil
		}); err != nil {
			return err
		}
		if err := a.UploadHost(buf, 0, mid, 0, n); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, buf, 0, n)
	}
	check := func(round int) {
		t.Helper()
		require.NoError(t, hostErr, "round %d", round)
		for i, v := range out.Bytes() {
			require.Equal(t, ^in.Bytes()[i], v, "round %d, byte %d: the copy after the host function did not see what it wrote", round, i)
		}
	}
	fill := func(round int) {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i*7 + round*31)
		}
		clear(out.Bytes())
	}
	fill(0)
	require.NoError(t, step())
	require.NoError(t, a.Synchronize())
	check(0)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, step)
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	for k := 1; k <= 3; k++ {
		fill(k)
		launch(t, a, g)
		check(k)
	}
}
