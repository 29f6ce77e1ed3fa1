package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// reserveKernels loads this library's device code (outside any capture)
// and reserves the kernel step's buffers, when the step runs kernels.
func (e *engine) reserveKernels() (err error) {
	if e.kernels <= 0 {
		return nil
	}
	a := e.a
	var ok bool
	if e.kl, ok = a.Driver().(driver.KernelLauncher); !ok {
		return fmt.Errorf("-kernels: backend %s runs no device code of this library (cuda, hip do)", a.Driver().Name())
	}
	mod, err := e.kl.LoadModule(kernels.Image())
	if err != nil {
		return err
	}
	e.axpy, e.block = mod.Kernels[kernels.Axpy], uint32(min(256, mod.MaxThreadsPerBlock))
	// The kernel strides over the grid: no more blocks than the device
	// runs at once.
	e.grid = uint32(max(1, min((hidden+int(e.block)-1)/int(e.block), mod.Multiprocessors)))
	if e.xs, err = a.Alloc(4 * hidden); err != nil {
		return err
	}
	if e.ys, err = a.Alloc(4 * hidden); err != nil {
		return err
	}
	if e.xin, err = a.HostAlloc(4 * hidden); err != nil {
		return err
	}
	if e.yout, err = a.HostAlloc(4); err != nil {
		return err
	}
	k := kernels.AxpyArgs{X: uint64(e.xs.Ptr()), Y: uint64(e.ys.Ptr()), N: hidden, A: 1}
	e.axpyParams = k.Encode(make([]byte, kernels.AxpySize))
	return nil
}

// kernelStep: x from the pinned input, y = 0, then kernels × (y = x + y),
// y[0] to the pinned output.
func (e *engine) kernelStep() error {
	a := e.a
	if err := a.UploadHost(e.xs, 0, e.xin, 0, 4*hidden); err != nil {
		return err
	}
	if err := a.Memset(e.ys, 0, 0, 4*hidden); err != nil {
		return err
	}
	grid := e.grid
	uses := []alloc.Buffer{e.xs, e.ys}
	for range e.kernels {
		if err := a.Enqueue("axpy", uses, func(s driver.Stream) error {
			return e.kl.LaunchKernel(e.axpy, grid, e.block, e.axpyParams, s)
		}); err != nil {
			return err
		}
	}
	return a.DownloadHost(e.yout, 0, e.ys, 0, 4)
}

// The token of step s, as every element of x; and the check that y[0] is
// kernels × that.
func tokenValue(s int) float32 { return float32(s%251 + 1) }

func (e *engine) writeKernelInput(s int) {
	b := e.xin.Bytes()
	for i := range hidden {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(tokenValue(s)))
	}
}

func (e *engine) checkKernelStep(s int) error {
	got := math.Float32frombits(binary.LittleEndian.Uint32(e.yout.Bytes()))
	if want := float32(e.kernels) * tokenValue(s); got != want {
		return fmt.Errorf("step %d: y[0] is %v, want %v (stale input or a lost kernel)", s, got, want)
	}
	return nil
}
