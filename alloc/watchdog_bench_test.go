package alloc_test

import (
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// BenchmarkWatchdog measures what the watchdog adds to a blocking call
// (issue 12, item 3): an empty Synchronize (nothing queued) and a
// Synchronize after one queued 256 B memset, each with the default
// watchdog and with it disabled, and the bare driver call as the floor.
func BenchmarkWatchdog(b *testing.B) {
	open := func(b *testing.B, watchdog int64) (*cpu.Driver, *alloc.Allocator) {
		d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		a, err := alloc.New(d, alloc.Options{Watchdog: time.Duration(watchdog)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close(); d.Close() })
		return d, a
	}
	for _, w := range []struct {
		name string
		on   int64
	}{{"watchdog=on", 0}, {"watchdog=off", -1}} {
		b.Run("op=sync-empty/"+w.name, func(b *testing.B) {
			_, a := open(b, w.on)
			for i := 0; i < b.N; i++ {
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("op=memset+sync/"+w.name, func(b *testing.B) {
			_, a := open(b, w.on)
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
		d, err := cpu.New(cpu.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
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
