package alloctest

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.ManagedMemory = (*Spy)(nil)

// MallocManaged, FreeManaged and PrefetchManaged forward to the inner
// driver's driver.ManagedMemory; without one they fail with an error
// wrapping errors.ErrUnsupported, as the allocator does for such a driver.
func (s *Spy) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	s.enter(MethodMallocManaged)
	m, err := s.managed()
	if err != nil {
		return 0, nil, err
	}
	return m.MallocManaged(size)
}

func (s *Spy) FreeManaged(p driver.DevicePtr) error {
	s.enter(MethodFreeManaged)
	m, err := s.managed()
	if err != nil {
		return err
	}
	return m.FreeManaged(p)
}

func (s *Spy) PrefetchManaged(p driver.DevicePtr, n int64, toHost bool, st driver.Stream) error {
	s.enter(MethodPrefetchManaged)
	m, err := s.managed()
	if err != nil {
		return err
	}
	return m.PrefetchManaged(p, n, toHost, st)
}

func (s *Spy) managed() (driver.ManagedMemory, error) {
	m, ok := s.inner.(driver.ManagedMemory)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no managed memory", errors.ErrUnsupported, s.inner.Name())
	}
	return m, nil
}
