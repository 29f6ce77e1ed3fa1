package memmap

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// SizeText writes n bytes in binary units with two decimals, as PyTorch's
// memory summary and out-of-memory message do: 512 B, 64.00 KiB, 1.50 GiB.
func SizeText(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.2f %ciB", v, "KMGTPE"[i])
}

// summaryKinds are the columns of a summary's table: the segment kinds
// (the pool's two arenas, AllocSync's own allocations, graphs'
// allocations), then the graph pools' blocks, which lie in small and large
// segments but are counted in a column of their own.
var summaryKinds = []string{"small", "large", "sync", "graph", poolColumn}

const poolColumn = "graph pools"

// maxSummaryGraphs bounds the graphs a summary lists one a row, largest
// first; the rest, the smallest, are counted.
const maxSummaryGraphs = 256

// Summary is the snapshot as text (PyTorch's torch.cuda.memory_summary):
// device memory by pool and by block state, the graph pools and the
// graphs (one row each, largest first: GraphsByMemory, PoolsByBytes), the allocator's current and peak bytes, its
// allocations and frees, out-of-memory errors and reclaim retries, the
// largest free block, the memory graphs hold and the fragmentation of the
// rest (Snapshot.Fragmentation). Peaks are the allocator's, not per pool
// (none is kept per pool).
func (s Snapshot) Summary() string {
	var b strings.Builder
	st := s.Stats
	fmt.Fprintf(&b, "capalloc memory summary: allocator %q, backend %q, device %q: %s total", s.Allocator, s.Backend, s.Device, SizeText(s.DeviceMemory))
	if s.DeviceFree != nil {
		fmt.Fprintf(&b, ", %s free", SizeText(*s.DeviceFree))
	}
	fmt.Fprintf(&b, "\ntaken %s; %s\n\n", s.Time.UTC().Format("2006-01-02 15:04:05.000Z"), captureText(s))

	states := BlockStates()
	total := len(summaryKinds)            // the total's column
	bytes := make([][]int64, len(states)) // by state, then by kind, the total last
	for i := range bytes {
		bytes[i] = make([]int64, total+1)
	}
	segs := make([]int, total+1)
	var largest int64
	pools := slices.Index(summaryKinds, poolColumn)
	for _, seg := range s.Segments {
		k := slices.Index(summaryKinds, seg.Kind) // -1: a kind of no column, in the total only
		for _, blk := range seg.Blocks {
			i := slices.Index(states, blk.State)
			if i < 0 {
				continue
			}
			if blk.Pool != 0 {
				bytes[i][pools] += blk.Size
			} else if k >= 0 {
				bytes[i][k] += blk.Size
			}
			bytes[i][total] += blk.Size
			if blk.State.Cached() && blk.Size > largest {
				largest = blk.Size
			}
		}
		if k >= 0 {
			segs[k]++
		}
		segs[total]++
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-24s\t%s\ttotal\t\n", "device memory by pool", strings.Join(summaryKinds, "\t"))
	for i, state := range states {
		row(tw, string(state), bytes[i])
	}
	all := make([]int64, total+1)
	cached := make([]int64, total+1) // the one meaning: reserved, not in use
	for i := range bytes {
		for k, n := range bytes[i] {
			all[k] += n
			if states[i].Cached() {
				cached[k] += n
			}
		}
	}
	row(tw, "cached (both states)", cached)
	row(tw, "all states", all)
	counts := make([]string, len(segs))
	for k, n := range segs {
		counts[k] = fmt.Sprint(n)
	}
	counts[pools] = "-" // a pool's blocks lie in the others' segments
	fmt.Fprintf(tw, "%-24s\t%s\t\n", "segments", strings.Join(counts, "\t"))
	tw.Flush()

	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(tw, "%-24s\tcurrent\tpeak\t\n", "bytes")
	fmt.Fprintf(tw, "%-24s\t%s\t%s\t\n", "in use (as requested)", SizeText(st.BytesInUse), SizeText(st.PeakInUse))
	fmt.Fprintf(tw, "%-24s\t%s\t%s\t\n", "reserved from the driver", SizeText(st.BytesReserved), SizeText(st.PeakReserved))
	fmt.Fprintf(tw, "%-24s\t%s\t\t\n", "cached in the pool", SizeText(st.BytesCached))
	fmt.Fprintf(tw, "%-24s\t%s\t\t\n", "held by graphs", SizeText(s.GraphBytes()))
	tw.Flush()
	writePools(&b, s)
	writeGraphs(&b, s)

	fmt.Fprintf(&b, "\nallocations %d (pool hits %d, misses %d), frees %d, live buffers %d\n", st.Allocs, st.PoolHits, st.PoolMisses, st.Frees, st.LiveBuffers)
	fmt.Fprintf(&b, "driver allocations %d, given back %d\n", st.DriverAllocs, st.DriverFrees)
	fmt.Fprintf(&b, "captures %d ended with a graph, %d without; allocations in captures %d; live graphs %d\n", st.Captures, st.FailedCapture, st.CaptureAllocs, st.LiveGraphs)
	fmt.Fprintf(&b, "out-of-memory errors %d, reclaim retries %d, watchdog timeouts %d\n", st.OutOfMemory, st.ReclaimRetries, st.Timeouts)
	fmt.Fprintf(&b, "largest free block %s\n", SizeText(largest))
	fmt.Fprintf(&b, "fragmentation outside graphs (reserved / in use, the %s graphs hold left out) %.2f\n", SizeText(s.GraphBytes()), s.Fragmentation())
	fmt.Fprintf(&b, "pinned host %s in %d buffers, %s cached, %d pins made\n", SizeText(st.HostBytes), st.HostBuffers, SizeText(st.HostCached), st.HostPins)
	return b.String()
}

// writePools writes a row per graph pool, largest first: its memory, what
// of it is free and its graphs.
func writePools(b *strings.Builder, s Snapshot) {
	if len(s.Pools) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(b, "\n")
	fmt.Fprintf(tw, "%-24s\tbytes\tfree\tborrowed blocks\tgraphs\t\n", "graph pools")
	for _, p := range s.PoolsByBytes() {
		name := safeText(p.Label())
		if p.Closed {
			name += " (closed)"
		}
		fmt.Fprintf(tw, "%-24s\t%s\t%s\t%d\t%d\t\n", name, SizeText(p.Bytes), SizeText(p.FreeBytes), p.Borrowed, len(p.Graphs))
	}
	tw.Flush()
}

// writeGraphs writes a row per graph (and the capture recording), largest
// first: its pool and the memory it owns, holds and uses, and its launches.
func writeGraphs(b *strings.Builder, s Snapshot) {
	if len(s.Graphs) == 0 {
		return
	}
	pools := map[int]string{}
	for _, p := range s.Pools {
		pools[p.ID] = safeText(p.Label())
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(b, "\n")
	fmt.Fprintf(tw, "%-24s\tpool\towns\tholds\tuses\tlaunches\t\n", "graphs")
	for i, g := range s.GraphsByMemory() {
		if i == maxSummaryGraphs {
			fmt.Fprintf(tw, "%-24s\t\n", fmt.Sprintf("... %d more", len(s.Graphs)-i))
			break
		}
		name := safeText(g.Label())
		if k := g.Kind(); k != "" {
			name += " (" + k + ")"
		}
		pool := "-"
		if g.Pool != 0 {
			pool = pools[g.Pool]
		}
		fmt.Fprintf(tw, "%-24s\t%s\t%s\t%s\t%s\t%d\t\n", name, pool, SizeText(g.OwnedBytes), SizeText(g.HeldBytes), SizeText(g.UsedBytes), g.Launches)
	}
	tw.Flush()
}

// safeText is s as a summary prints a name: as it is when that is plain
// text, quoted (Go syntax) when it holds a quote, a backslash or a
// character that is not printable.
func safeText(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

func captureText(s Snapshot) string {
	if s.Capturing {
		return "a capture is recording"
	}
	return "no capture recording"
}

func row(tw *tabwriter.Writer, name string, ns []int64) {
	cells := make([]string, len(ns))
	for i, n := range ns {
		cells[i] = SizeText(n)
	}
	fmt.Fprintf(tw, "%-24s\t%s\t\n", name, strings.Join(cells, "\t"))
}
