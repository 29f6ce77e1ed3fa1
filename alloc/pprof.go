package alloc

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// WriteProfile writes the device memory profile of every open allocator of
// the process, as pprof.Lookup("heap") writes the Go heap's: a gzipped
// pprof protobuf that `go tool pprof` opens as it is. Sample types
// inuse_space, inuse_objects (memory still taken, by who holds it now),
// alloc_space, alloc_objects (everything sampled, by who held it when
// allocated); samples labelled allocator, backend, device and owner
// (pool-live, sync-live, graph-owned, held-for-graph, workspace,
// pinned-host, graph-pool), and a graph's allocations graph ("batch-8
// (graph 12)") and, in a graph pool, pool ("decode (pool 3)"). Stacks
// start at the engine's call to Alloc, AllocSync, Workspace or HostAlloc.
// Nothing is sampled until SetProfileRate turns recording on; the profile
// then carries a comment saying so. A graph pool's memory that no live
// buffer of its graphs holds (its free blocks, and what its buffers'
// sizes were rounded up by) is not sampled but counted, exactly, in one
// sample per pool (owner graph-pool, at the call that made the pool), so
// that at rate 1 a pool's samples sum to GraphPool.Bytes.
func WriteProfile(w io.Writer) error {
	var ds []profileData
	for _, a := range allocators() {
		a.mu.Lock()
		if !a.guard.closed {
			ds = append(ds, profileDataLocked(a))
		}
		a.mu.Unlock()
	}
	return buildProfile(ds).Write(w)
}

// WriteProfile writes this allocator's device memory profile, as the
// package's WriteProfile writes every allocator's. It fails with ErrClosed
// once the allocator is closed.
func (a *Allocator) WriteProfile(w io.Writer) error {
	a.mu.Lock()
	if a.guard.closed {
		a.mu.Unlock()
		return a.fail("WriteProfile", -1, StateNone, ErrClosed)
	}
	d := profileDataLocked(a)
	a.mu.Unlock()
	return buildProfile([]profileData{d}).Write(w)
}

// profileData is an allocator's samples, copied under its lock so the
// profile is built without it.
type profileData struct {
	name, backend, device string
	inUse                 []inUseSample
	stacks                []*stackRecord
	allocs                [][numOwners]struct{ objects, bytes float64 } // by stacks' index
}

type inUseSample struct {
	stk         *stackRecord
	own         owner
	size, rate  int64
	graph, pool string // labels: the graph and pool holding it, "" for none
}

// profileDataLocked copies a's samples out. Caller holds a.mu.
func profileDataLocked(a *Allocator) profileData {
	p := &a.prof
	d := profileData{name: a.name, backend: a.backend, device: a.info.Name,
		inUse:  make([]inUseSample, 0, p.nInUse),
		stacks: make([]*stackRecord, 0, len(p.stacks)),
		allocs: make([][numOwners]struct{ objects, bytes float64 }, 0, len(p.stacks)),
	}
	for s := p.inUse; s != nil; s = s.next {
		is := inUseSample{stk: s.stk, own: ownerPinnedHost, size: s.size, rate: s.rate}
		if s.blk != nil {
			is.own = ownerOf(s.blk)
			if c := s.blk.cap; c != nil {
				is.graph, is.pool = c.labels()
			}
		}
		d.inUse = append(d.inUse, is)
	}
	d.inUse = append(d.inUse, poolSamplesLocked(a)...)
	for _, stk := range p.stacks {
		for ; stk != nil; stk = stk.collision {
			d.stacks = append(d.stacks, stk)
			d.allocs = append(d.allocs, stk.allocs)
		}
	}
	return d
}

const (
	// allocAPI prefixes the frames the profile trims from the top of a
	// stack: the allocator package's own functions and methods, so the
	// leaf is the engine's call site, as in a Go heap profile.
	allocAPI = "github.com/capalloc/capalloc/alloc."

	profileOffComment = "device memory profile recording is off: call alloc.SetProfileRate(512 << 10) (runtime.MemProfileRate's default), or 1 to record every allocation; any samples here were recorded before it was turned off"
)

// buildProfile makes the pprof profile of the allocators' samples.
func buildProfile(ds []profileData) *profile.Profile {
	rate := profileRate.Load()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "inuse_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "alloc_objects", Unit: "count"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            rate,
		TimeNanos:         time.Now().UnixNano(),
		Comments:          []string{"capalloc device memory"},
	}
	if rate == 0 {
		p.Comments = append(p.Comments, profileOffComment)
	}
	sym := newSymbolizer(p)
	type key struct {
		d           int
		stk         *stackRecord
		own         owner
		graph, pool string
	}
	values := map[key]*[4]float64{}
	var order []key // first-seen order, so equal input gives an equal profile
	add := func(k key) *[4]float64 {
		v := values[k]
		if v == nil {
			v = new([4]float64)
			values[k] = v
			order = append(order, k)
		}
		return v
	}
	for i, d := range ds {
		for _, s := range d.inUse {
			objects, bytes := sampleWeight(s.size, s.rate)
			v := add(key{i, s.stk, s.own, s.graph, s.pool})
			v[0] += bytes
			v[1] += objects
		}
		for j, stk := range d.stacks {
			for o, c := range d.allocs[j] {
				if c.objects > 0 {
					v := add(key{i, stk, owner(o), "", ""})
					v[2] += c.bytes
					v[3] += c.objects
				}
			}
		}
	}
	for _, k := range order {
		v := values[k]
		d := ds[k.d]
		labels := map[string][]string{
			"allocator": {d.name},
			"backend":   {d.backend},
			"device":    {d.device},
			"owner":     {k.own.String()},
		}
		if k.graph != "" {
			labels["graph"] = []string{k.graph}
		}
		if k.pool != "" {
			labels["pool"] = []string{k.pool}
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: sym.stack(k.stk.pcs),
			Value:    []int64{int64(v[0] + 0.5), int64(v[1] + 0.5), int64(v[2] + 0.5), int64(v[3] + 0.5)},
			Label:    labels,
		})
	}
	return p
}

// symbolizer turns return addresses into the profile's locations and
// functions, each made once.
type symbolizer struct {
	p       *profile.Profile
	mapping *profile.Mapping
	locs    map[locKey]*profile.Location
	funcs   map[[2]string]*profile.Function
}

// locKey is a location's innermost frame's address and how many of its
// innermost frames (the allocator's own, inlined) it leaves out.
type locKey struct {
	pc   uintptr
	skip int
}

func newSymbolizer(p *profile.Profile) *symbolizer {
	exe, _ := os.Executable()
	m := &profile.Mapping{ID: 1, File: filepath.Base(exe), Limit: ^uint64(0),
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	p.Mapping = []*profile.Mapping{m}
	return &symbolizer{p: p, mapping: m,
		locs: map[locKey]*profile.Location{}, funcs: map[[2]string]*profile.Function{}}
}

// stack returns the locations of pcs, leaf first, without the allocator's
// own frames on top.
func (s *symbolizer) stack(pcs []uintptr) []*profile.Location {
	out := make([]*profile.Location, 0, len(pcs))
	trimming := true
	for _, fs := range physicalFrames(pcs) {
		skip := 0
		if trimming {
			for skip < len(fs) && strings.HasPrefix(fs[skip].Function, allocAPI) {
				skip++
			}
			if skip == len(fs) {
				continue // wholly the allocator's
			}
			trimming = false
		}
		out = append(out, s.location(skip, fs[skip:]))
	}
	return out
}

// physicalFrames expands a stack of return addresses into its frames,
// inlined calls included, grouped by the real (not inlined) call each
// belongs to, innermost first: one group per pprof location.
//
// The stack is expanded whole, by one runtime.CallersFrames: the
// frame-pointer walk (internal/callstack) gives one address per real
// frame, and CallersFrames restores the callers inlined at an address
// only when more addresses follow it; expanded alone, an address gives
// its innermost function and loses the callers inlined around it (issue
// 31). runtime.Callers' stacks, which carry an address per inlined
// caller, expand the same way.
func physicalFrames(pcs []uintptr) [][]runtime.Frame {
	var out [][]runtime.Frame
	var group []runtime.Frame
	it := runtime.CallersFrames(pcs)
	for more := len(pcs) > 0; more; {
		var f runtime.Frame
		f, more = it.Next()
		if f.PC == 0 && f.Function == "" {
			continue // no frame at all
		}
		group = append(group, f)
		if f.Func != nil || !more { // a real frame ends the group: Func is nil for inlined ones
			out = append(out, group)
			group = nil
		}
	}
	return out
}

// location returns the location of frames fs, one real frame's, skip of
// its innermost frames left out.
func (s *symbolizer) location(skip int, fs []runtime.Frame) *profile.Location {
	k := locKey{fs[0].PC, skip}
	if l := s.locs[k]; l != nil {
		return l
	}
	l := &profile.Location{ID: uint64(len(s.p.Location) + 1), Mapping: s.mapping, Address: uint64(fs[0].PC)}
	for _, f := range fs {
		l.Line = append(l.Line, profile.Line{Function: s.function(f), Line: int64(f.Line)})
	}
	s.locs[k] = l
	s.p.Location = append(s.p.Location, l)
	return l
}

func (s *symbolizer) function(f runtime.Frame) *profile.Function {
	k := [2]string{f.Function, f.File}
	if fn := s.funcs[k]; fn != nil {
		return fn
	}
	name := f.Function
	if name == "" {
		name = "unknown"
	}
	fn := &profile.Function{ID: uint64(len(s.p.Function) + 1), Name: name, SystemName: name, Filename: f.File}
	s.funcs[k] = fn
	s.p.Function = append(s.p.Function, fn)
	return fn
}
