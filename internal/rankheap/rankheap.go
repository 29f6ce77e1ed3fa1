// Package rankheap opens one rank's symmetric heap the way the examples'
// ranks do: the device heap (symheap.OpenDevice: this library's kernels)
// where the rank's driver has IPC memory, the host heap of the group
// (symheap.Group.Open: host functions) otherwise, so one step written
// against symheap.Collectives runs on cpu, cuda and hip.
package rankheap

import (
	"context"
	"errors"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// Source is what a rank opens its heap from: the host heap's group (cpu),
// or the device heap's exchange and size (cuda, hip), whichever its
// driver runs.
type Source struct {
	Group    *symheap.Group
	Exchange symheap.Exchange
	Size     int64 // the device heap's bytes a rank
}

// Local is the source for n ranks that are goroutines of one process: a
// group of n host heaps of size bytes, and an exchange within the process
// for device heaps of the same size. The caller closes the Group.
func Local(n int, size int64) (Source, error) {
	g, err := symheap.NewGroup(n, size)
	if err != nil {
		return Source{}, err
	}
	return Source{Group: g, Exchange: symheap.NewLocalExchange(n), Size: size}, nil
}

// Open opens rank r's heap on a, with opts (the device heap takes its
// Timeout); a device heap whose collectives do not run on the driver is
// closed and refused. kind says which heap: "device heap" or "host heap".
func (s Source) Open(r int, a *alloc.Allocator, opts symheap.Options) (h symheap.Collectives, kind string, err error) {
	if !symheap.DeviceRuns(a.Driver()) {
		hh, err := s.Group.Open(r, a, opts)
		if err != nil {
			return nil, "", err
		}
		return hh, "host heap", nil
	}
	dh, err := symheap.OpenDevice(r, a, s.Exchange, s.Size, symheap.DeviceOptions{Timeout: opts.Timeout})
	if err != nil {
		return nil, "", err
	}
	if err := dh.CollectivesRun(); err != nil {
		return nil, "", errors.Join(err, dh.Close())
	}
	return dh, "device heap", nil
}

// Run is one rank whole: it opens a driver of backend (a backends config)
// for rank r, an allocator on it and the rank's heap (Open), runs fn on
// them, and closes all three, their errors joined to fn's. kind says
// which heap ran.
func (s Source) Run(backend string, r int, opts symheap.Options, fn func(h symheap.Collectives, a *alloc.Allocator) error) (kind string, err error) {
	d, err := backends.OpenDriver(context.Background(), backend)
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	h, kind, err := s.Open(r, a, opts)
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	return kind, fn(h, a)
}

// RunLocal runs n ranks as goroutines of this process on Local(n, size):
// rank r is Run(backend, r, opts) with fn(h, a, r). It closes the group
// once every rank has returned, joins the ranks' errors, and says which
// heap each rank ran on.
func RunLocal(backend string, n int, size int64, opts symheap.Options, fn func(h symheap.Collectives, a *alloc.Allocator, r int) error) (kinds []string, err error) {
	src, err := Local(n, size)
	if err != nil {
		return nil, err
	}
	defer src.Group.Close()
	kinds = make([]string, n)
	errs := ranks.Each(n, func(r int) (err error) {
		kinds[r], err = src.Run(backend, r, opts, func(h symheap.Collectives, a *alloc.Allocator) error {
			return fn(h, a, r)
		})
		return err
	})
	return kinds, errors.Join(errs...)
}
