// Package allocprom exports capalloc's allocator counters to Prometheus.
// It is a package of its own so that only engines that import it link
// client_golang.
//
//	prometheus.MustRegister(allocprom.NewCollector())
//
// At each scrape the collector reads every open allocator of the process
// (alloc/internal/registry), labelled backend, device and allocator (its
// alloc.Options.Name):
//
//	capalloc_in_use_bytes, capalloc_reserved_bytes, capalloc_cached_bytes,
//	capalloc_peak_in_use_bytes, capalloc_peak_reserved_bytes,
//	capalloc_live_buffers, capalloc_live_graphs,
//	capalloc_pinned_host_bytes, capalloc_pinned_host_buffers,
//	capalloc_pinned_host_cached_bytes   (gauges)
//	capalloc_memory_bytes{state=...}   device memory by block state: live,
//	    workspace, graph-owned, held-for-graph, cached-fragment,
//	    cached-segment (a gauge; a snapshot's Bytes, without listing the
//	    blocks, up to a second old: see below; memmap.BlockState.Meaning
//	    says what each is)
//	capalloc_allocs_total, capalloc_frees_total,
//	capalloc_pool_hits_total, capalloc_pool_misses_total,
//	capalloc_driver_allocs_total, capalloc_driver_frees_total,
//	capalloc_capture_allocs_total, capalloc_captures_total,
//	capalloc_failed_captures_total, capalloc_watchdog_timeouts_total,
//	capalloc_out_of_memory_total, capalloc_reclaim_retries_total,
//	capalloc_pinned_host_pins_total   (counters)
//	capalloc_fragmentation_ratio   reserved over in use, both over the
//	    memory graphs do not hold (memmap.Snapshot.Fragmentation), 0 when
//	    nothing outside graphs is in use (a gauge)
//	capalloc_graph_memory_bytes   what graphs hold: graph-owned, graph-pool
//	    and held-for-graph memory (a gauge)
//	capalloc_graph_pool_bytes{pool=...,pool_id=...},
//	capalloc_graph_pool_free_bytes{...}, capalloc_graph_pool_graphs{...}
//	    each graph pool's memory, what of it is free for its next
//	    captures, and its live graphs (gauges; pool is the name given with
//	    alloc.GraphPool.SetName, pool_id its ID, unique in the process)
//	capalloc_device_total_bytes, capalloc_device_free_bytes   the device's
//	    memory; free only where the driver can tell (driver.MemInfoer),
//	    every user of the device counted (gauges)
//
// and, for the step executor (alloc/step) of the whole process, labelled
// by the step's name (step.Config.Name) only:
//
//	capalloc_step_fallbacks_total{step=...,reason=...}   captures that
//	    failed, so the step ran its captured region eagerly, by reason
//	    (step.Stats.Reason: sync-in-capture, incompatible-op, ...)
//	capalloc_step_eager_runs_total{step=...}   eager runs of the captured
//	    region after a failed capture (counters)
//
// "Cached" means reserved from the driver and not in use, as everywhere
// in capalloc: capalloc_cached_bytes is the sum of the two cached states'
// capalloc_memory_bytes (while the engine allocates they may differ by
// what it did in between: see below).
//
// capalloc_memory_bytes needs a walk of the allocator's blocks under its
// lock, so it is taken at most once a second per allocator, one walk at a
// time in the process, as the views' snapshots are (alloc/internal/walkcache):
// however many scrapers poll, they cannot hold the engine's lock for more.
// The other metrics are read at each scrape.
package allocprom

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/internal/walkcache"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/alloc/step"
)

// labels every metric carries.
var labels = []string{"backend", "device", "allocator"}

// metric is one exported figure of alloc.Stats.
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(alloc.Stats) float64
}

func gauge(name, help string, v func(alloc.Stats) float64) metric {
	return metric{prometheus.NewDesc(name, help, labels, nil), prometheus.GaugeValue, v}
}

func counter(name, help string, v func(alloc.Stats) float64) metric {
	return metric{prometheus.NewDesc(name, help, labels, nil), prometheus.CounterValue, v}
}

var metrics = []metric{
	gauge("capalloc_in_use_bytes", "Bytes of live buffers, as requested.", func(s alloc.Stats) float64 { return float64(s.BytesInUse) }),
	gauge("capalloc_reserved_bytes", "Bytes held from the driver: live, cached and graph-owned.", func(s alloc.Stats) float64 { return float64(s.BytesReserved) }),
	gauge("capalloc_cached_bytes", "Bytes reserved from the driver and not in use: capalloc_memory_bytes of states cached-fragment and cached-segment.", func(s alloc.Stats) float64 { return float64(s.BytesCached) }),
	gauge("capalloc_peak_in_use_bytes", "Highest capalloc_in_use_bytes so far.", func(s alloc.Stats) float64 { return float64(s.PeakInUse) }),
	gauge("capalloc_peak_reserved_bytes", "Highest capalloc_reserved_bytes so far.", func(s alloc.Stats) float64 { return float64(s.PeakReserved) }),
	gauge("capalloc_live_buffers", "Buffers allocated and not freed.", func(s alloc.Stats) float64 { return float64(s.LiveBuffers) }),
	gauge("capalloc_live_graphs", "Graphs captured and not closed.", func(s alloc.Stats) float64 { return float64(s.LiveGraphs) }),
	gauge("capalloc_pinned_host_bytes", "Bytes of pinned host buffers.", func(s alloc.Stats) float64 { return float64(s.HostBytes) }),
	gauge("capalloc_pinned_host_buffers", "Pinned host buffers not closed.", func(s alloc.Stats) float64 { return float64(s.HostBuffers) }),
	gauge("capalloc_pinned_host_cached_bytes", "Pinned host bytes the host cache keeps for reuse.", func(s alloc.Stats) float64 { return float64(s.HostCached) }),
	counter("capalloc_pinned_host_pins_total", "Pinnings (driver host allocations) made.", func(s alloc.Stats) float64 { return float64(s.HostPins) }),
	counter("capalloc_allocs_total", "Successful Alloc, AllocSync and workspace allocations.", func(s alloc.Stats) float64 { return float64(s.Allocs) }),
	counter("capalloc_frees_total", "Buffers freed.", func(s alloc.Stats) float64 { return float64(s.Frees) }),
	counter("capalloc_pool_hits_total", "Allocations the pool served without the driver.", func(s alloc.Stats) float64 { return float64(s.PoolHits) }),
	counter("capalloc_pool_misses_total", "Allocations that needed a new segment from the driver.", func(s alloc.Stats) float64 { return float64(s.PoolMisses) }),
	counter("capalloc_driver_allocs_total", "Driver allocations.", func(s alloc.Stats) float64 { return float64(s.DriverAllocs) }),
	counter("capalloc_driver_frees_total", "Driver allocations given back.", func(s alloc.Stats) float64 { return float64(s.DriverFrees) }),
	counter("capalloc_capture_allocs_total", "Allocations made inside captures.", func(s alloc.Stats) float64 { return float64(s.CaptureAllocs) }),
	counter("capalloc_captures_total", "Captures ended with a graph.", func(s alloc.Stats) float64 { return float64(s.Captures) }),
	counter("capalloc_failed_captures_total", "Captures ended without a graph.", func(s alloc.Stats) float64 { return float64(s.FailedCapture) }),
	counter("capalloc_watchdog_timeouts_total", "Driver calls and captures the watchdog gave up on.", func(s alloc.Stats) float64 { return float64(s.Timeouts) }),
	counter("capalloc_out_of_memory_total", "Allocations that failed for lack of device memory.", func(s alloc.Stats) float64 { return float64(s.OutOfMemory) }),
	counter("capalloc_reclaim_retries_total", "Allocations retried after the reclaim ladder gave memory back.", func(s alloc.Stats) float64 { return float64(s.ReclaimRetries) }),
	gauge("capalloc_memory_limit_bytes", "The most capalloc_reserved_bytes may be (memory_limit, memory_fraction); 0: no limit but the device's.", func(s alloc.Stats) float64 { return float64(s.MemoryLimit) }),
}

// The device's memory, from the driver rather than alloc.Stats: the
// total (alloc.Allocator.Info) always, the free bytes when the driver can
// tell (driver.MemInfoer; every user of the device counted).
var (
	deviceTotal = prometheus.NewDesc("capalloc_device_total_bytes", "Device memory the driver can hand out.", labels, nil)
	deviceFree  = prometheus.NewDesc("capalloc_device_free_bytes", "Free device memory, every user of the device counted, where the driver can tell.", labels, nil)
)

// The figures of the walk (memmap.Snapshot without its blocks) rather
// than of alloc.Stats: graphs' memory, and fragmentation without it.
var (
	fragmentation = prometheus.NewDesc("capalloc_fragmentation_ratio", "Bytes reserved over bytes in use, graphs' memory left out of both (0 when nothing outside graphs is in use).", labels, nil)
	graphMemory   = prometheus.NewDesc("capalloc_graph_memory_bytes", "Device memory graphs hold: states graph-owned, graph-pool and held-for-graph.", labels, nil)
	poolLabels    = append([]string{"pool", "pool_id"}, labels...)
	poolBytes     = prometheus.NewDesc("capalloc_graph_pool_bytes", "Device memory a graph pool borrowed from the allocator's cache: what its graphs share.", poolLabels, nil)
	poolFree      = prometheus.NewDesc("capalloc_graph_pool_free_bytes", "Of a graph pool's memory, the bytes free for its next captures.", poolLabels, nil)
	poolGraphs    = prometheus.NewDesc("capalloc_graph_pool_graphs", "A graph pool's live graphs (and the capture recording into it).", poolLabels, nil)
)

// The step executor's process totals (step.ProcessTotals).
var (
	stepFallbacks = prometheus.NewDesc("capalloc_step_fallbacks_total", "Captures of a step that failed, so it ran its captured region eagerly, by reason.", []string{"step", "reason"}, nil)
	stepEagerRuns = prometheus.NewDesc("capalloc_step_eager_runs_total", "Eager runs of a step's captured region after a failed capture.", []string{"step"}, nil)
)

var memoryBytes = prometheus.NewDesc("capalloc_memory_bytes",
	"Device memory held from the driver, by what its blocks are doing (memmap.BlockState).",
	append([]string{"state"}, labels...), nil)

// usage keeps each allocator's block-less snapshot (its memory by block
// state and graph pool, and its counters) for a second: a scrape walks
// the blocks at most once a second however many scrapers there are.
var usage = walkcache.New(registry.Usage)

// Collector is a prometheus.Collector of every open allocator's counters.
type Collector struct{}

// NewCollector returns the collector; register it once per registry.
func NewCollector() *Collector { return &Collector{} }

// Describe sends every metric's description.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
	ch <- memoryBytes
	for _, d := range []*prometheus.Desc{fragmentation, graphMemory, poolBytes, poolFree, poolGraphs, stepFallbacks, stepEagerRuns} {
		ch <- d
	}
	ch <- deviceTotal
	ch <- deviceFree
}

// Collect reads every open allocator now, and the steps' totals. An
// allocator closed meanwhile is left out.
func (*Collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range step.ProcessTotals() {
		for r, n := range t.Fallbacks {
			ch <- constMetric(stepFallbacks, prometheus.CounterValue, float64(n), label(t.Step), r)
		}
		ch <- constMetric(stepEagerRuns, prometheus.CounterValue, float64(t.EagerRuns), label(t.Step))
	}
	for _, a := range registry.Allocators() {
		u, err := usage.Get(a)
		if err != nil {
			continue // closed meanwhile
		}
		lv := []string{label(a.Driver().Name()), label(a.Info().Name), label(registry.Name(a))}
		s := alloc.Stats(u.Stats)
		for _, m := range metrics {
			ch <- constMetric(m.desc, m.kind, m.value(s), lv...)
		}
		for _, st := range memmap.BlockStates() {
			ch <- constMetric(memoryBytes, prometheus.GaugeValue, float64(u.Bytes[st]), append([]string{string(st)}, lv...)...)
		}
		ch <- constMetric(fragmentation, prometheus.GaugeValue, u.Fragmentation(), lv...)
		ch <- constMetric(graphMemory, prometheus.GaugeValue, float64(u.GraphBytes()), lv...)
		for _, p := range u.Pools {
			plv := append([]string{label(p.Name), strconv.Itoa(p.ID)}, lv...)
			ch <- constMetric(poolBytes, prometheus.GaugeValue, float64(p.Bytes), plv...)
			ch <- constMetric(poolFree, prometheus.GaugeValue, float64(p.FreeBytes), plv...)
			ch <- constMetric(poolGraphs, prometheus.GaugeValue, float64(len(p.Graphs)), plv...)
		}
		ch <- constMetric(deviceTotal, prometheus.GaugeValue, float64(a.Info().TotalMemory), lv...)
		if mi, ok := a.Driver().(driver.MemInfoer); ok {
			if free, _, err := mi.MemInfo(); err == nil {
				ch <- constMetric(deviceFree, prometheus.GaugeValue, float64(free), lv...)
			}
		}
	}
}

// label makes a label value valid UTF-8, which Prometheus requires: the
// names come from drivers (a plugin child's device name among them) and
// from the engine, and a scrape must never fail on them.
func label(v string) string { return strings.ToValidUTF8(v, "\uFFFD") }

// constMetric is NewConstMetric that reports an error to the scrape
// (prometheus.NewInvalidMetric) rather than panicking in it.
func constMetric(d *prometheus.Desc, kind prometheus.ValueType, v float64, lv ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, kind, v, lv...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
