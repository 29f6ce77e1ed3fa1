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
	for name, c := range map[string]struct {
		old, new string
		want     error
	}{
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
	} {
		in := strings.Replace(goodHistory, c.old, c.new, 1)
		if in == goodHistory {
			t.Fatalf("%s: the case changes nothing", name)
		}
		_, err := memmap.ReadHistories(strings.NewReader(in), memmap.DefaultHistoryLimits)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
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
