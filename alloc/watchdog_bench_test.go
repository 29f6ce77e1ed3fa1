package alloc_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// BenchmarkWatchdog measures what the watchdog adds to a blocking call
// (issue 12, item 3): an empty Synchronize (nothing queued) and a
// Synchronize after one queued 256 B memset, each with the default
// watchdog and with it disabled, and the bare driver call as the floor.
func BenchmarkWatchdog(b *testing.B) {
	open := func(b *testing.B, watchdog int64) *alloc.Allocator {
		return cpuAllocatorWith(b, 1<<30, alloc.Options{Watchdog: time.Duration(watchdog)})
	}
	for _, w := range []struct {
		name string
		on   int64
	}{{"watchdog=on", 0}, {"watchdog=off", -1}} {
		b.Run("op=sync-empty/"+w.name, func(b *testing.B) {
			a := open(b, w.on)
			for i := 0; i < b.N; i++ {
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("op=memset+sync/"+w.name, func(b *testing.B) {
			a := open(b, w.on)
			buf, err := a.Alloc(256)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.Memset(buf, 0, byte(i), 256); err != nil {
					b.Fatal(err)
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			a.Free(buf)
		})
	}
	b.Run("op=sync-empty/driver", func(b *testing.B) {
		d := newCPU(b, 0) // the default device size
		s, err := d.CreateStream()
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if err := d.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// handoffOnly hides a driver's StreamIdler and StreamPoller (it forwards
// the host-function launch only), so a watched Synchronize hands the wait
// to a worker goroutine, as it does for a plugin: the blocking wait the
// polled one replaced (issue 23, item 1).
type handoffOnly struct {
	driver.Driver
	driver.HostFuncLauncher
}

// BenchmarkWatchdogBusyWait measures what a watched Synchronize costs while
// the stream is busy for 1 ms (a host function that sleeps): its latency
// (sec/op) and the process CPU time it burns (cpu-ns/op, from getrusage;
// cpu-% is that over the wall time), for the polled wait on the caller's
// goroutine, the hand-off to a worker that blocks in the driver, and the
// watchdog off (the caller itself runs the host function: the floor).
func BenchmarkWatchdogBusyWait(b *testing.B) {
	const busy = time.Millisecond
	for _, c := range []struct {
		name     string
		watchdog time.Duration
		wrap     func(*cpu.Driver) driver.Driver
	}{
		{"wait=polled", time.Minute, func(d *cpu.Driver) driver.Driver { return d }},
		{"wait=handoff", time.Minute, func(d *cpu.Driver) driver.Driver { return handoffOnly{d, d} }},
		{"wait=unwatched", -1, func(d *cpu.Driver) driver.Driver { return d }},
	} {
		b.Run(c.name, func(b *testing.B) {
			a := alloctest.New(b, c.wrap(newCPU(b, 1<<20)), alloc.Options{Watchdog: c.watchdog})
			sleep := func() error { time.Sleep(busy); return nil }
			start, cpu0 := time.Now(), processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.LaunchHostFunc(sleep); err != nil {
					b.Fatal(err)
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			wall, used := time.Since(start), processCPU()-cpu0
			b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(100*float64(used)/float64(wall), "cpu-%")
		})
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
