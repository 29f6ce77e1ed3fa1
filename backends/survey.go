package backends

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Availability is whether one backend opens on this machine.
type Availability struct {
	Name string
	// Err is nil when the backend opened (and was closed again), else why
	// not, wrapping driver.ErrBackendUnavailable.
	Err error
	// Info is the device the backend opened (zero when it did not): its
	// name and safety profile (docs/capture-safety.md).
	Info driver.DeviceInfo
}

// Survey opens, and closes again, every backend this binary offers: each
// registered name, and each of targets through every registered scheme
// ("plugin:cpu" for target cpu), and reports which open here and why the
// others do not, in that order. The conformance suite's default run covers
// what it reports open, and capprobe -backends prints it.
func Survey(ctx context.Context, targets ...string) []Availability {
	names := Names()
	for _, s := range Schemes() {
		for _, n := range Names() {
			if slices.Contains(targets, n) {
				names = append(names, s+":"+n)
			}
		}
	}
	out := make([]Availability, 0, len(names))
	for _, n := range names {
		info, err := Choice{Name: n}.Probe(ctx)
		out = append(out, Availability{Name: n, Err: err, Info: info})
	}
	return out
}

// Available opens c and closes it again: nil when it opens here, else why
// not, wrapping driver.ErrBackendUnavailable.
func (c Choice) Available(ctx context.Context) error {
	_, err := c.Probe(ctx)
	return err
}

// Probe is Available that also returns the opened device's info.
func (c Choice) Probe(ctx context.Context) (driver.DeviceInfo, error) {
	d, err := c.Open(ctx)
	if err != nil {
		if !errors.Is(err, driver.ErrBackendUnavailable) {
			err = fmt.Errorf("%w: %w", driver.ErrBackendUnavailable, err)
		}
		return driver.DeviceInfo{}, err
	}
	info := d.Info()
	return info, d.Close()
}
