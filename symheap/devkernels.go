package symheap

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/kernels"
)

// devKernels is the device code as loaded on one driver, with the launch
// configuration its device allows.
type devKernels struct {
	kl      alloc.KernelLauncher
	mod     *alloc.Module
	block   uint32 // threads per block
	maxGrid uint32 // blocks per launch, at most
}

// loaded caches the module per driver: loading (a PTX JIT or a hiprtc
// compilation) is slow and device wide, so it happens once, at the first
// OpenDevice on the driver, outside any capture. The driver keeps the
// module until it is closed.
var loaded sync.Map // alloc.KernelLauncher -> *loading

type loading struct {
	once sync.Once
	k    *devKernels
	err  error
}

// loadKernels loads the collectives on h's driver. A driver that runs no
// device code of ours (errors.ErrUnsupported) leaves h without
// collectives, which then refuse with that error.
func (h *DeviceHeap) loadKernels() error {
	kl, ok := h.a.Driver().(alloc.KernelLauncher)
	if !ok {
		h.kernErr = fmt.Errorf("%w: symheap: backend %s runs no device code of this library", errors.ErrUnsupported, h.a.Driver().Name())
		return nil
	}
	v, _ := loaded.LoadOrStore(kl, &loading{})
	l := v.(*loading)
	l.once.Do(func() { l.k, l.err = newDevKernels(kl) })
	if errors.Is(l.err, errors.ErrUnsupported) {
		h.kernErr = l.err
		return nil
	}
	if l.err != nil {
		loaded.CompareAndDelete(kl, l) // a later open tries again
		return fmt.Errorf("symheap: loading the collectives of rank %d: %w", h.rank, l.err)
	}
	h.kern = l.k
	return nil
}

func newDevKernels(kl alloc.KernelLauncher) (*devKernels, error) {
	mod, err := kl.LoadModule(kernels.Image())
	if err != nil {
		return nil, err
	}
	for _, n := range kernels.Names {
		if _, ok := mod.Kernels[n]; !ok {
			return nil, fmt.Errorf("%w: symheap: the loaded module lacks kernel %s", alloc.ErrDriver, n)
		}
	}
	// 512 threads a block where the device allows (a multiple of the warp),
	// and no more blocks than run at once: the barriers spin, so every
	// block of a launch must be resident.
	block := min(512, mod.MaxThreadsPerBlock)
	if block >= 32 {
		block &^= 31
	}
	if block < kernels.MaxRanks || mod.TimerHz == 0 {
		return nil, fmt.Errorf("%w: symheap: device allows %d threads a block, timer %d Hz: the collectives need %d threads and a timer",
			errors.ErrUnsupported, mod.MaxThreadsPerBlock, mod.TimerHz, kernels.MaxRanks)
	}
	return &devKernels{kl: kl, mod: mod, block: uint32(block), maxGrid: uint32(max(1, min(kernels.MaxBlocks, mod.Multiprocessors)))}, nil
}

// grid is the blocks for work items of block threads each (at least 1).
func (k *devKernels) grid(items int64) uint32 {
	g := (items + int64(k.block) - 1) / int64(k.block)
	return uint32(max(1, min(g, int64(k.maxGrid))))
}

// ticks is d in the kernels' timer's ticks.
func (k *devKernels) ticks(d time.Duration) uint64 {
	return uint64(d.Seconds() * float64(k.mod.TimerHz))
}
