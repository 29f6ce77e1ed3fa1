//go:build !linux

package cpu

// vmSupported: without memfd_create there is no cheap way to back a
// reservation chunk by chunk, so the driver does not offer virtual memory
// here (MapGranularity is 0).
const vmSupported = false

// The driver checks vmSupported before any of these.
func vmReserve(int64) ([]byte, error) { return nil, errNoVM("reserve address") }
func vmMap([]byte) error              { return errNoVM("map memory") }
func vmUnmap([]byte) error            { return errNoVM("unmap memory") }
func vmRelease([]byte) error          { return errNoVM("release address") }
