package alloctest

import (
	"errors"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.HostRegisterer = (*Spy)(nil)

// HostRegister and HostUnregister forward to the inner driver's
// driver.HostRegisterer; without one they fail with an error wrapping
// errors.ErrUnsupported, as the allocator does for such a driver.
func (s *Spy) HostRegister(b []byte) (driver.DevicePtr, error) {
	r, err := s.hostRegisterer(MethodHostRegister)
	if err != nil {
		return 0, err
	}
	return r.HostRegister(b)
}

func (s *Spy) HostUnregister(b []byte) error {
	r, err := s.hostRegisterer(MethodHostUnregister)
	if err != nil {
		return err
	}
	return r.HostUnregister(b)
}

func (s *Spy) hostRegisterer(method Method) (driver.HostRegisterer, error) {
	return forwardTo[driver.HostRegisterer](s, method, errors.ErrUnsupported, "cannot register host memory")
}
