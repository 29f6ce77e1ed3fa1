package allocprom_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocprom"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/alloc/step"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/internal/ranks"
)

func newAllocator(t *testing.T, name string) *alloc.Allocator {
	t.Helper()
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return alloctest.New(t, d, alloc.Options{Name: name})
}

// value finds the sample of family name whose labels include want.
func value(t *testing.T, fams []*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// A registry's scrape has every open allocator's counters under its
// labels, with the bytes held for graphs told apart, and the names pass
// Prometheus' lint.
func TestScrape(t *testing.T) {
	a := newAllocator(t, "prom-decoder")
	b := newAllocator(t, "prom-prefill")
	x, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	y, err := a.Alloc(64 << 10)
	require.NoError(t, err)
	h, err := a.HostAlloc(4 << 10)
	require.NoError(t, err)
	defer h.Close()
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(y, 0, h, 0, 4<<10); err != nil {
			return err
		}
		if err := a.Free(y); err != nil { // held for the graph
			return err
		}
		_, err := a.Alloc(256 << 10)
		return err
	})
	require.NoError(t, err)
	defer g.Close()
	defer a.Free(x)
	z, err := b.Alloc(2 << 20)
	require.NoError(t, err)
	defer b.Free(z)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(allocprom.NewCollector()))
	fams, err := reg.Gather()
	require.NoError(t, err)
	dec := map[string]string{"allocator": "prom-decoder", "backend": "cpu", "device": a.Info().Name}
	s := a.Stats()
	require.EqualValues(t, s.BytesInUse, value(t, fams, "capalloc_in_use_bytes", dec))
	require.EqualValues(t, s.BytesReserved, value(t, fams, "capalloc_reserved_bytes", dec))
	require.EqualValues(t, s.Allocs, value(t, fams, "capalloc_allocs_total", dec))
	require.EqualValues(t, 1, value(t, fams, "capalloc_captures_total", dec))
	require.EqualValues(t, 1, value(t, fams, "capalloc_live_graphs", dec))
	require.EqualValues(t, 4<<10, value(t, fams, "capalloc_pinned_host_bytes", dec))
	with := func(state string) map[string]string {
		m := map[string]string{"state": state}
		for k, v := range dec {
			m[k] = v
		}
		return m
	}
	require.EqualValues(t, 256<<10, value(t, fams, "capalloc_memory_bytes", with("graph-owned")))
	require.EqualValues(t, 64<<10, value(t, fams, "capalloc_memory_bytes", with("held-for-graph")))
	require.EqualValues(t, 2<<20, value(t, fams, "capalloc_in_use_bytes", map[string]string{"allocator": "prom-prefill"}))

	problems, err := testutil.CollectAndLint(allocprom.NewCollector())
	require.NoError(t, err)
	require.Empty(t, problems, "metric names and help follow Prometheus' conventions")

	// Through the exposition format, as a Prometheus server scrapes it.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), `capalloc_memory_bytes{allocator="prom-decoder",backend="cpu",device="cpu (emulated)",state="held-for-graph"} 65536`)

	// A closed allocator is gone from the next scrape.
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	defer d.Close()
	c, err := alloc.New(d, alloc.Options{Name: "prom-closed"})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	fams, err = reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				require.NotEqual(t, "prom-closed", l.GetValue())
			}
		}
	}
}

// Only engines that import allocprom link client_golang: alloc and the
// HTTP views do not depend on it.
func TestOnlyImportersLinkPrometheus(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/capalloc/capalloc/alloc", "github.com/capalloc/capalloc/alloc/allocview").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "prometheus")
	require.Contains(t, string(out), "github.com/google/pprof/profile", "the list is the real one")
}

// namedDriver is a driver whose backend and device names are not valid
// UTF-8, as a plugin child's device name may be.
type namedDriver struct{ driver.Driver }

func (namedDriver) Name() string { return "cpu\xfe" }
func (d namedDriver) Info() driver.DeviceInfo {
	i := d.Driver.Info()
	i.Name = "gpu\xff\xc3"
	return i
}

// A scrape never panics on a name that is not valid UTF-8: the labels are
// made valid.
func TestScrapeInvalidUTF8Names(t *testing.T) {
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	defer d.Close()
	a, err := alloc.New(namedDriver{d}, alloc.Options{Name: "prom-utf8"})
	require.NoError(t, err)
	defer a.Close()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(allocprom.NewCollector()))
	var fams []*dto.MetricFamily
	require.NotPanics(t, func() { fams, err = reg.Gather() })
	require.NoError(t, err)
	require.Zero(t, value(t, fams, "capalloc_in_use_bytes", map[string]string{"allocator": "prom-utf8", "backend": "cpu\uFFFD", "device": "gpu\uFFFD"}))
}

// Out-of-memory errors, the reclaim ladder's retries, the fragmentation
// ratio and the device's total and free memory are exported; the free
// bytes only where the driver can tell (driver.MemInfoer).
func TestScrapeOutOfMemoryAndDevice(t *testing.T) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 8 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := alloc.New(d, alloc.Options{Name: "prom-oom"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	blind, err := alloc.New(struct{ driver.Driver }{d}, alloc.Options{Name: "prom-blind"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, blind.Close()) })
	limited, err := alloc.New(d, alloc.Options{Name: "prom-limit", MemoryLimit: 3 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, limited.Close()) })

	small, err := a.Alloc(64 << 10)
	require.NoError(t, err)
	require.NoError(t, a.Free(small)) // cached: given back and retried below
	b, err := a.AllocSync(7 << 20)
	require.NoError(t, err)
	defer a.Free(b)
	_, err = a.Alloc(6 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(allocprom.NewCollector()))
	fams, err := reg.Gather()
	require.NoError(t, err)
	lv := map[string]string{"allocator": "prom-oom"}
	s := a.Stats()
	require.Positive(t, s.ReclaimRetries)
	require.EqualValues(t, 1, value(t, fams, "capalloc_out_of_memory_total", lv))
	require.EqualValues(t, s.ReclaimRetries, value(t, fams, "capalloc_reclaim_retries_total", lv))
	require.InDelta(t, float64(s.BytesReserved)/float64(s.BytesInUse), value(t, fams, "capalloc_fragmentation_ratio", lv), 1e-9)
	require.EqualValues(t, 8<<20, value(t, fams, "capalloc_device_total_bytes", lv))
	require.EqualValues(t, 0, value(t, fams, "capalloc_memory_limit_bytes", lv), "no limit")
	require.EqualValues(t, 3<<20, value(t, fams, "capalloc_memory_limit_bytes", map[string]string{"allocator": "prom-limit"}))
	require.EqualValues(t, 1<<20, value(t, fams, "capalloc_device_free_bytes", lv))
	require.EqualValues(t, 0, value(t, fams, "capalloc_fragmentation_ratio", map[string]string{"allocator": "prom-blind"}), "nothing in use: 0")
	require.EqualValues(t, 8<<20, value(t, fams, "capalloc_device_total_bytes", map[string]string{"allocator": "prom-blind"}))
	for _, f := range fams {
		if f.GetName() == "capalloc_device_free_bytes" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					require.False(t, l.GetName() == "allocator" && l.GetValue() == "prom-blind", "a driver that cannot tell has no free bytes")
				}
			}
		}
	}
}

// "Cached" has one meaning: capalloc_cached_bytes is the sum of the
// capalloc_memory_bytes of the states memmap.BlockState.Cached names,
// free space in used segments and wholly free segments alike (issue 31,
// item 4: it was 7 MiB beside memory_bytes{state="cached"} 0).
func TestCachedBytesIsTheCachedStates(t *testing.T) {
	a := newAllocator(t, "prom-cached")
	var bufs []alloc.Buffer
	for _, n := range []int64{256 << 10, 256 << 10, 256 << 10, 40 << 20} {
		b, err := a.Alloc(n)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	require.NoError(t, a.Free(bufs[1])) // a hole in a used segment
	require.NoError(t, a.Free(bufs[3])) // a segment wholly free
	defer a.Free(bufs[0])
	defer a.Free(bufs[2])

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(allocprom.NewCollector()))
	fams, err := reg.Gather()
	require.NoError(t, err)
	labels := func(state string) map[string]string {
		m := map[string]string{"allocator": "prom-cached"}
		if state != "" {
			m["state"] = state
		}
		return m
	}
	var sum float64
	for _, st := range memmap.BlockStates() {
		v := value(t, fams, "capalloc_memory_bytes", labels(string(st)))
		if st.Cached() {
			require.Positive(t, v, "the workload has memory in state %s", st)
			sum += v
		}
	}
	cached := value(t, fams, "capalloc_cached_bytes", labels(""))
	require.Equal(t, cached, sum, "capalloc_cached_bytes against the cached states' capalloc_memory_bytes")
	require.EqualValues(t, a.Stats().BytesCached, cached)
}

// A step that falls back counts in capalloc_step_fallbacks_total under its
// name and reason, and its eager runs in capalloc_step_eager_runs_total.
func TestStepFallbackMetric(t *testing.T) {
	a := newAllocator(t, "prom-step")
	st, err := step.New(a, step.Config{Name: "prom-decode", Logger: slog.New(slog.DiscardHandler),
		Captured: func() error { return a.Synchronize() }})
	require.NoError(t, err)
	defer st.Close()
	for range 3 {
		require.NoError(t, st.Run())
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(allocprom.NewCollector())
	fams, err := reg.Gather()
	require.NoError(t, err)
	require.EqualValues(t, 1, value(t, fams, "capalloc_step_fallbacks_total", map[string]string{"step": "prom-decode", "reason": "sync-in-capture"}))
	require.EqualValues(t, 3, value(t, fams, "capalloc_step_eager_runs_total", map[string]string{"step": "prom-decode"}))
}

// Scrapes share a walk of the allocator's blocks: four scrapers, each
// scraping after every new buffer, walk it at most once a second. Each
// walk sees every buffer allocated before it, so the live bytes take a
// new value at each walk, and the values seen count the walks.
func TestScrapesShareAWalk(t *testing.T) {
	a := newAllocator(t, "prom-walks")
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(allocprom.NewCollector()))
	live := map[string]string{"allocator": "prom-walks", "state": string(memmap.BlockLive)}
	const rounds, scrapers = 50, 4
	seen := map[float64]bool{}
	start := time.Now()
	for range rounds {
		b, err := a.Alloc(4 << 10)
		require.NoError(t, err)
		defer a.Free(b)
		fams := make([][]*dto.MetricFamily, scrapers)
		errs := ranks.Each(scrapers, func(i int) (err error) {
			fams[i], err = reg.Gather()
			return err
		})
		for i := range scrapers {
			require.NoError(t, errs[i])
			seen[value(t, fams[i], "capalloc_memory_bytes", live)] = true
		}
	}
	elapsed := time.Since(start)
	require.LessOrEqual(t, len(seen), int(elapsed/time.Second)+1,
		"%d scrapes in %v walked the allocator %d times", rounds*scrapers, elapsed, len(seen))
}
