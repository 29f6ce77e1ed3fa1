package alloctest

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.HostRegisterer = (*Spy)(nil)

// HostRegister and HostUnregister forward to the inner driver's
// driver.HostRegisterer; without one they fail with an error wrapping
// errors.ErrUnsupported, as the allocator does for such a driver.
func (s *Spy) HostRegister(b []byte) (driver.DevicePtr, error) {
	s.enter(MethodHostRegister)
	r, err := s.hostRegisterer()
	if err != nil {
		return 0, err
	}
	return r.HostRegister(b)
}

func (s *Spy) HostUnregister(b []byte) error {
	s.enter(MethodHostUnregister)
	r, err := s.hostRegisterer()
	if err != nil {
		return err
	}
	return r.HostUnregister(b)
}

func (s *Spy) hostRegisterer() (driver.HostRegisterer, error) {
	r, ok := s.inner.(driver.HostRegisterer)
	if !ok {
		return nil, fmt.Errorf("%w: %s cannot register host memory", errors.ErrUnsupported, s.inner.Name())
	}
	return r, nil
}
