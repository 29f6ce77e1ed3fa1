package memmap_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// goodHistory is a small history as WriteHistory writes it.
const goodHistory = `{"allocator":"a","backend":"cpu","device":"d","start":"2026-01-02T03:04:05Z","capacity":10,"recorded":5,"resolution_ns":1000000,
"events":[
 {"seq":0,"t_ns":0,"kind":"alloc","addr":4096,"size":512,"state":"live","in_use":512,"reserved":2097152,"stack":0},
 {"seq":1,"t_ns":0,"kind":"capture-begin","size":0,"in_use":512,"reserved":2097152,"detail":"global","stack":-1},
 {"seq":2,"t_ns":1000000,"kind":"capture-end","size":0,"in_use":512,"reserved":2097152,"stack":-1},
 {"seq":3,"t_ns":1000000,"kind":"out-of-memory","size":-1,"in_use":512,"reserved":2097152,"detail":"why","stack":-1},
 {"seq":4,"t_ns":2000000,"kind":"free","addr":4096,"size":512,"state":"live","in_use":0,"reserved":2097152,"stack":0}],
"stacks":[[{"function":"main.step","file":"main.go","line":9}]]}`

// edit replaces old with new in a good history, and wants ReadHistories
// to refuse the result with an error matching want.
type edit struct {
	old, new string
	want     error
}

// refused applies each edit to good and checks the refusal.
func refused(t *testing.T, good string, edits map[string]edit) {
	t.Helper()
	for name, c := range edits {
		in := strings.Replace(good, c.old, c.new, 1)
		if in == good {
			t.Fatalf("%s: the case changes nothing", name)
		}
		_, err := memmap.ReadHistories(strings.NewReader(in), memmap.DefaultHistoryLimits)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// ownedHistory is a history of HistoryFormat: its allocations say which
// call made them and which graph owns them, its captures their graph and
// graph pool.
const ownedHistory = `{"allocator":"a","backend":"cpu","device":"d","start":"2026-01-02T03:04:05Z","format":2,"capacity":10,"recorded":10,"resolution_ns":1000000,
"events":[
 {"seq":0,"t_ns":0,"kind":"alloc","addr":4096,"size":512,"state":"workspace","via":"workspace","workspace":"attn","in_use":512,"reserved":2097152,"stack":-1},
 {"seq":1,"t_ns":0,"kind":"alloc","addr":8192,"size":512,"state":"live","via":"alloc-sync","in_use":1024,"reserved":2097664,"stack":-1},
 {"seq":2,"t_ns":0,"kind":"capture-begin","size":0,"graph":7,"pool":3,"in_use":1024,"reserved":2097664,"detail":"global","stack":-1},
 {"seq":3,"t_ns":0,"kind":"alloc","addr":12288,"size":256,"state":"graph-owned","graph":7,"in_use":1280,"reserved":2097664,"stack":-1},
 {"seq":4,"t_ns":0,"kind":"capture-end","size":0,"graph":7,"in_use":1280,"reserved":2097664,"stack":-1},
 {"seq":5,"t_ns":0,"kind":"pool-close","size":0,"pool":3,"in_use":1280,"reserved":2097664,"stack":-1},
 {"seq":6,"t_ns":0,"kind":"graph-close","size":0,"graph":7,"in_use":1280,"reserved":2097664,"stack":-1},
 {"seq":7,"t_ns":0,"kind":"free","addr":12288,"size":256,"state":"graph-owned","graph":7,"in_use":1024,"reserved":2097664,"stack":-1},
 {"seq":8,"t_ns":0,"kind":"free","addr":4096,"size":512,"state":"live","in_use":512,"reserved":2097664,"stack":-1},
 {"seq":9,"t_ns":0,"kind":"out-of-memory","size":4096,"via":"alloc-sync","in_use":512,"reserved":2097664,"detail":"why","stack":-1}],
"stacks":[]}`

// The fields of HistoryFormat are read, and refused, with a typed error
// saying where, when out of their range or on a kind they do not belong
// to; an older history (no format) may not have them.
func TestReadHistoriesOwners(t *testing.T) {
	hs, err := memmap.ReadHistories(strings.NewReader(ownedHistory), memmap.DefaultHistoryLimits)
	if err != nil || len(hs) != 1 {
		t.Fatalf("a history of format 2: %v", err)
	}
	e := hs[0].Events
	if hs[0].Format != memmap.HistoryFormat || e[0].Via != memmap.ViaWorkspace || e[0].Workspace != "attn" || e[1].Via != memmap.ViaAllocSync ||
		e[2].Graph != 7 || e[2].Pool != 3 || e[3].Graph != 7 || e[5].Kind != memmap.EventPoolClose || e[5].Pool != 3 || e[9].Via != memmap.ViaAllocSync {
		t.Fatalf("read as %+v", hs[0])
	}
	refused(t, ownedHistory, map[string]edit{
		"format":                  {`"format":2`, `"format":3`, memmap.ErrInvalidHistory},
		"negative format":         {`"format":2`, `"format":-1`, memmap.ErrInvalidHistory},
		"fields of an old file":   {`"format":2,`, ``, memmap.ErrInvalidHistory},
		"via":                     {`"via":"alloc-sync"`, `"via":"mmap"`, memmap.ErrInvalidHistory},
		"via on a free":           {`"addr":4096,"size":512,"state":"live","in_use":512`, `"addr":4096,"size":512,"state":"live","via":"alloc-sync","in_use":512`, memmap.ErrInvalidHistory},
		"workspace without name":  {`,"workspace":"attn"`, ``, memmap.ErrInvalidHistory},
		"name without workspace":  {`"via":"alloc-sync"`, `"workspace":"x"`, memmap.ErrInvalidHistory},
		"name on an oom":          {`"via":"alloc-sync","in_use":512`, `"via":"workspace","workspace":"x","in_use":512`, memmap.ErrInvalidHistory},
		"workspace name too long": {`"workspace":"attn"`, `"workspace":"` + strings.Repeat("w", 5000) + `"`, memmap.ErrHistoryTooLarge},
		"negative graph":          {`"graph":7,"pool":3`, `"graph":-7,"pool":3`, memmap.ErrInvalidHistory},
		"negative pool":           {`"graph":7,"pool":3`, `"graph":7,"pool":-3`, memmap.ErrInvalidHistory},
		"graph on a segment":      {`"kind":"pool-close","size":0,"pool":3`, `"kind":"segment-map","size":0,"graph":3`, memmap.ErrInvalidHistory},
		"pool on an alloc":        {`"state":"graph-owned","graph":7,"in_use":1280`, `"state":"graph-owned","graph":7,"pool":3,"in_use":1280`, memmap.ErrInvalidHistory},
		"graph on live memory":    {`"state":"live","via":"alloc-sync"`, `"state":"live","via":"alloc-sync","graph":7`, memmap.ErrInvalidHistory},
		"graph-owned, no graph":   {`"state":"graph-owned","graph":7,"in_use":1280`, `"state":"graph-owned","in_use":1280`, memmap.ErrInvalidHistory},
		"pool-close, no pool":     {`"kind":"pool-close","size":0,"pool":3`, `"kind":"pool-close","size":0`, memmap.ErrInvalidHistory},
		"capture, no graph":       {`"kind":"capture-end","size":0,"graph":7`, `"kind":"capture-end","size":0`, memmap.ErrInvalidHistory},
	})
	// An older history: graph-owned memory without a graph is what it says.
	old := strings.Replace(goodHistory, `"state":"live","in_use":512`, `"state":"graph-owned","in_use":512`, 1)
	if _, err := memmap.ReadHistories(strings.NewReader(old), memmap.DefaultHistoryLimits); err != nil {
		t.Fatalf("an older history's graph-owned allocation: %v", err)
	}
}

// ReadHistories reads one history or an array of them, and refuses, with
// a typed error saying where, every field out of its range.
func TestReadHistories(t *testing.T) {
	hs, err := memmap.ReadHistories(strings.NewReader(goodHistory), memmap.DefaultHistoryLimits)
	if err != nil || len(hs) != 1 || len(hs[0].Events) != 5 {
		t.Fatalf("a good history: %v, %+v", err, hs)
	}
	hs, err = memmap.ReadHistories(strings.NewReader(" ["+goodHistory+","+goodHistory+"]"), memmap.DefaultHistoryLimits)
	if err != nil || len(hs) != 2 {
		t.Fatalf("an array of two: %v, %d", err, len(hs))
	}
	refused(t, goodHistory, map[string]edit{
		"kind":        {`"kind":"capture-end"`, `"kind":"boom"`, memmap.ErrInvalidHistory},
		"state":       {`"state":"live","in_use":512`, `"state":"odd","in_use":512`, memmap.ErrInvalidHistory},
		"stack":       {`"reserved":2097152,"stack":0}`, `"reserved":2097152,"stack":7}`, memmap.ErrInvalidHistory},
		"seq":         {`"seq":2`, `"seq":1`, memmap.ErrInvalidHistory},
		"time":        {`"seq":2,"t_ns":1000000`, `"seq":2,"t_ns":-5`, memmap.ErrInvalidHistory},
		"size":        {`"addr":4096,"size":512,"state":"live","in_use":512`, `"addr":4096,"size":0,"state":"live","in_use":512`, memmap.ErrInvalidHistory},
		"oom size":    {`"size":-1`, `"size":-2`, memmap.ErrInvalidHistory},
		"in use":      {`"in_use":0`, `"in_use":-1`, memmap.ErrInvalidHistory},
		"recorded":    {`"recorded":5`, `"recorded":4`, memmap.ErrInvalidHistory},
		"line":        {`"line":9`, `"line":-9`, memmap.ErrInvalidHistory},
		"not json":    {`"allocator"`, `allocator`, memmap.ErrInvalidHistory},
		"wrong shape": {`"events":[`, `"events":{"x":[`, memmap.ErrInvalidHistory},
	})
	small := memmap.DefaultHistoryLimits
	for name, lim := range map[string]func(*memmap.HistoryLimits){
		"bytes":  func(l *memmap.HistoryLimits) { l.Bytes = 100 },
		"events": func(l *memmap.HistoryLimits) { l.Events = 4 },
		"stacks": func(l *memmap.HistoryLimits) { l.Stacks = 0 },
		"text":   func(l *memmap.HistoryLimits) { l.Text = 3 },
	} {
		l := small
		lim(&l)
		if _, err := memmap.ReadHistories(strings.NewReader(goodHistory), l); !errors.Is(err, memmap.ErrHistoryTooLarge) {
			t.Errorf("limit on %s: %v, want ErrHistoryTooLarge", name, err)
		}
	}
}

// Any input is read or refused with a typed error, never a panic; what is
// read is valid, and reads back the same once written again.
func FuzzReadHistories(f *testing.F) {
	f.Add([]byte(goodHistory))
	f.Add([]byte("[" + goodHistory + "]"))
	f.Add([]byte(`{"capacity":0,"recorded":0,"events":[],"stacks":[]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"events":[{"seq":0,"kind":"free","addr":1,"size":1,"stack":-1}],"recorded":1}`))
	f.Add([]byte(ownedHistory))
	f.Add([]byte(`{"format":2,"recorded":2,"events":[{"seq":0,"kind":"pool-close","pool":1,"stack":-1},{"seq":1,"kind":"alloc","addr":1,"size":1,"state":"graph-owned","graph":1,"stack":-1}]}`))
	lim := memmap.HistoryLimits{Bytes: 1 << 20, Events: 1000, Stacks: 100, Frames: 16, Text: 256}
	f.Fuzz(func(t *testing.T, data []byte) {
		hs, err := memmap.ReadHistories(bytes.NewReader(data), lim)
		if err != nil {
			if !errors.Is(err, memmap.ErrInvalidHistory) && !errors.Is(err, memmap.ErrHistoryTooLarge) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		for i := range hs {
			if err := hs[i].Validate(lim); err != nil {
				t.Fatalf("read, then invalid: %v", err)
			}
			_ = hs[i].Summary()
		}
		again, err := json.Marshal(hs)
		if err != nil {
			t.Fatal(err)
		}
		back, err := memmap.ReadHistories(bytes.NewReader(again), memmap.HistoryLimits{Bytes: 64 << 20, Events: lim.Events, Stacks: lim.Stacks, Frames: lim.Frames, Text: lim.Text})
		if err != nil || len(back) != len(hs) {
			t.Fatalf("written again, not read back: %v", err)
		}
	})
}
