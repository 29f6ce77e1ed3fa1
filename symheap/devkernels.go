package symheap

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// devKernels is the device code as loaded on one driver, with the launch
// configuration its device allows.
type devKernels struct {
	kl    driver.KernelLauncher
	mod   *driver.Module
	block uint32 // threads per block
	// The device's residency for the collectives (topology.go): perSM
	// blocks of the scarcest collective kernel, limiting, fit on one
	// multiprocessor at block threads; perSM × mod.Multiprocessors blocks
	// run at once. occupancy is false where the driver could not say
	// (then perSM is 1: every device holds one block of a kernel it runs).
	perSM     int
	limiting  string
	occupancy bool
	// The same for the aligned variants (kernels.Aligned), which launch
	// their own grids: fewer registers hold more blocks.
	perSMAligned    int
	limitingAligned string
}

// loaded caches the module per driver: loading (a PTX JIT or a hiprtc
// compilation) is slow and device wide, so it happens once, at the first
// OpenDevice on the driver, outside any capture. The driver keeps the
// module until it is closed.
var loaded sync.Map // driver.KernelLauncher -> *loading

type loading struct {
	once sync.Once
	k    *devKernels
	err  error
}

// loadKernels loads the collectives on h's driver. A driver that runs no
// device code of ours (errors.ErrUnsupported) leaves h without
// collectives, which then refuse with that error.
func (h *DeviceHeap) loadKernels() error {
	kl, ok := h.a.Driver().(driver.KernelLauncher)
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

func newDevKernels(kl driver.KernelLauncher) (*devKernels, error) {
	mod, err := kl.LoadModule(kernels.Image())
	if err != nil {
		return nil, err
	}
	for _, n := range kernels.Names {
		if _, ok := mod.Kernels[n]; !ok {
			return nil, fmt.Errorf("%w: symheap: the loaded module lacks kernel %s", driver.ErrDriver, n)
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
	k := &devKernels{kl: kl, mod: mod, block: uint32(block)}
	if err := k.measure(); err != nil {
		return nil, err
	}
	return k, nil
}

// measure asks the driver how many blocks of each collective kernel fit
// on one multiprocessor at the launch's block size, and keeps the least,
// of the general kernels and of the aligned variants apart. A driver
// without the query (errors.ErrUnsupported) is taken to hold one.
func (k *devKernels) measure() error {
	k.occupancy = false
	var general, aligned []string
	for _, n := range kernels.Names {
		switch {
		case n == kernels.Axpy, n == kernels.Put: // no barrier: its blocks need not be co-resident
		case kernels.IsAligned(n):
			aligned = append(aligned, n)
		default:
			general = append(general, n)
		}
	}
	var err error
	if k.perSM, k.limiting, err = k.least(general); err != nil {
		return err
	}
	if k.perSMAligned, k.limitingAligned, err = k.least(aligned); err != nil {
		return err
	}
	k.occupancy = k.perSM > 0
	if !k.occupancy {
		k.perSM, k.perSMAligned = 1, 1
	}
	return nil
}

// least is the fewest blocks of names one multiprocessor holds, and the
// kernel that holds them; 0 where the driver has no occupancy query.
func (k *devKernels) least(names []string) (int, string, error) {
	per, limiting := 0, ""
	for _, n := range names {
		b, err := k.kl.MaxActiveBlocks(k.mod.Kernels[n], k.block)
		if errors.Is(err, errors.ErrUnsupported) {
			return 0, n, nil
		}
		if err != nil {
			return 0, "", fmt.Errorf("symheap: occupancy of %s at %d threads a block: %w", n, k.block, err)
		}
		if limiting == "" || b < per {
			per, limiting = b, n
		}
	}
	return per, limiting, nil
}

// ticks is d in the kernels' timer's ticks.
func (k *devKernels) ticks(d time.Duration) uint64 {
	return uint64(d.Seconds() * float64(k.mod.TimerHz))
}
