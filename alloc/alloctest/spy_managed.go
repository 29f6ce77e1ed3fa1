package alloctest

import (
	"errors"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.ManagedMemory = (*Spy)(nil)

// MallocManaged, FreeManaged and PrefetchManaged forward to the inner
// driver's driver.ManagedMemory; without one they fail with an error
// wrapping errors.ErrUnsupported, as the allocator does for such a driver.
func (s *Spy) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	m, err := s.managed(MethodMallocManaged)
	if err != nil {
		return 0, nil, err
	}
	return m.MallocManaged(size)
}

func (s *Spy) FreeManaged(p driver.DevicePtr) error {
	m, err := s.managed(MethodFreeManaged)
	if err != nil {
		return err
	}
	return m.FreeManaged(p)
}

func (s *Spy) PrefetchManaged(p driver.DevicePtr, n int64, toHost bool, st driver.Stream) error {
	m, err := s.managed(MethodPrefetchManaged)
	if err != nil {
		return err
	}
	return m.PrefetchManaged(p, n, toHost, st)
}

func (s *Spy) managed(method Method) (driver.ManagedMemory, error) {
	return forwardTo[driver.ManagedMemory](s, method, errors.ErrUnsupported, "has no managed memory")
}
