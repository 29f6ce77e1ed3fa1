package plugin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// "faulty" is cpu with injected faults, registered in the test binary, which
// is also the plugin child: faults happen in the backend's process only.
// Options (besides cpu's): malloc=exit-N (Malloc exits the process with
// status N), sync=hang (StreamSynchronize never returns), query=hang,
// begin=hang (BeginCapture), end=hang (EndCapture), memset=hang or exit-N
// (MemsetAsync, which the host pipelines).
func init() {
	driver.Register("faulty", func(ctx context.Context, o driver.Options, _ driver.Memory) (driver.Driver, error) {
		d, own, err := cpuWithout(ctx, o, driver.Memory{}, "malloc", "sync", "query", "begin", "end", "memset")
		if err != nil {
			return nil, err
		}
		return &faulty{Driver: d, malloc: own["malloc"], sync: own["sync"], query: own["query"], begin: own["begin"], end: own["end"], memset: own["memset"]}, nil
	})
}

type faulty struct {
	driver.Driver
	malloc, sync, query, begin, end, memset string
}

func (f *faulty) inject(fault string) {
	switch {
	case fault == "hang":
		select {}
	case strings.HasPrefix(fault, "exit-"):
		n, _ := strconv.Atoi(strings.TrimPrefix(fault, "exit-"))
		os.Exit(n)
	case fault != "":
		panic(fmt.Sprintf("unknown fault %q", fault))
	}
}

func (f *faulty) Malloc(n int64) (driver.DevicePtr, error) {
	f.inject(f.malloc)
	return f.Driver.Malloc(n)
}

func (f *faulty) StreamSynchronize(s driver.Stream) error {
	f.inject(f.sync)
	return f.Driver.StreamSynchronize(s)
}

func (f *faulty) StreamQuery(s driver.Stream) (bool, error) {
	f.inject(f.query)
	return f.Driver.StreamQuery(s)
}

func (f *faulty) BeginCapture(s driver.Stream, m alloc.CaptureMode) error {
	f.inject(f.begin)
	return f.Driver.BeginCapture(s, m)
}

func (f *faulty) EndCapture(s driver.Stream) (driver.GraphHandle, error) {
	f.inject(f.end)
	return f.Driver.EndCapture(s)
}

func (f *faulty) MemsetAsync(dst driver.DevicePtr, v byte, n int64, s driver.Stream) error {
	f.inject(f.memset)
	return f.Driver.MemsetAsync(dst, v, n, s)
}
