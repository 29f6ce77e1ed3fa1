package main

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// step is the captured work that reads the weights: y from the weights,
// then y to the pinned output.
type step struct {
	a       *alloc.Allocator
	weights *alloc.HostBuffer // the mapping, from MapHost
	y       alloc.Buffer      // the weights as the device uses them
	out     *alloc.HostBuffer // y, downloaded at every replay
	stage   *alloc.HostBuffer // cpu in place: what the host function read
	kl      driver.KernelLauncher
	axpy    driver.Kernel
	params  []byte
	grid    uint32
	block   uint32
	how     string // how the step reads the weights, for the report
}

// newStep maps m and reserves the step's memory (outside any capture).
func newStep(a *alloc.Allocator, m []byte) (s *step, err error) {
	s = &step{a: a}
	n := int64(len(m))
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	if s.weights, err = a.Host().MapHost(m); err != nil {
		return nil, fmt.Errorf("MapHost: %w", err)
	}
	if s.y, err = a.Alloc(n); err != nil {
		return nil, err
	}
	if s.out, err = a.HostAlloc(n); err != nil {
		return nil, err
	}
	switch info := a.Info(); {
	case !info.PageableMemoryAccess:
		s.how = "registered (no pageable memory access), copied by a captured UploadHost"
		return s, nil
	case !info.ReadsHostInPlace():
		s.how = "registered (pageable memory access without the host's page tables: HMM could migrate it), copied by a captured UploadHost"
		return s, nil
	}
	if kl, ok := a.Driver().(driver.KernelLauncher); ok {
		s.how = "in place (through the host's page tables: no registration, no copy), read by a captured kernel at DevicePtr"
		return s, s.loadAxpy(kl, n)
	}
	s.how = "in place (through the host's page tables: no registration, no copy), read by a captured host function (the cpu backend's device is the host)"
	s.stage, err = a.HostAlloc(n)
	return s, err
}

// loadAxpy loads the library's kernels; y = 1*weights + y reads the
// weights at the mapping's device address.
func (s *step) loadAxpy(kl driver.KernelLauncher, n int64) error {
	mod, err := kl.LoadModule(kernels.Image())
	if err != nil {
		return err
	}
	floats := uint64(n / 4)
	s.kl, s.axpy, s.block = kl, mod.Kernels[kernels.Axpy], uint32(min(256, mod.MaxThreadsPerBlock))
	s.grid = uint32(max(1, min((int(floats)+int(s.block)-1)/int(s.block), mod.Multiprocessors)))
	k := kernels.AxpyArgs{X: uint64(s.weights.DevicePtr()), Y: uint64(s.y.Ptr()), N: floats, A: 1}
	s.params = k.Encode(make([]byte, kernels.AxpySize))
	return nil
}

// enqueue is the step, as captured.
func (s *step) enqueue() error {
	a, n := s.a, s.weights.Size()
	var err error
	switch {
	case s.kl != nil:
		err = errors.Join(a.Memset(s.y, 0, 0, n), a.Enqueue("axpy", []alloc.Buffer{s.y}, func(st driver.Stream) error {
			return s.kl.LaunchKernel(s.axpy, s.grid, s.block, s.params, st)
		}))
	case s.stage != nil:
		err = a.LaunchHostFunc(func() error { copy(s.stage.Bytes(), s.weights.Bytes()); return nil })
		if err == nil {
			err = a.UploadHost(s.y, 0, s.stage, 0, n)
		}
	default:
		err = a.UploadHost(s.y, 0, s.weights, 0, n)
	}
	if err != nil {
		return err
	}
	return a.DownloadHost(s.out, 0, s.y, 0, n)
}

// close releases what newStep took (the mapping's buffer last: Close
// unregisters it where MapHost registered).
func (s *step) close() error {
	var errs []error
	if s.y.Size() > 0 {
		errs = append(errs, s.a.Free(s.y))
	}
	for _, h := range []*alloc.HostBuffer{s.stage, s.out, s.weights} {
		if h != nil {
			errs = append(errs, h.Close())
		}
	}
	return errors.Join(errs...)
}
