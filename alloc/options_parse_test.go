package alloc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseOptionsReadsEveryKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Options
	}{
		{"", Options{}},
		{" , ,", Options{}},
		{"expandable_segments=true", Options{ExpandableSegments: true}},
		{"expandable_segments:True", Options{ExpandableSegments: true}},
		{"expandable_segments=1", Options{ExpandableSegments: true}},
		{"expandable_segments=False", Options{}},
		{"expandable_segments=0", Options{}},
		{"watchdog=30s", Options{Watchdog: 30 * time.Second}},
		{"watchdog:1m30s", Options{Watchdog: 90 * time.Second}},
		{"watchdog=0", Options{}},
		{"watchdog=off", Options{Watchdog: -1}},
		{"watchdog=OFF", Options{Watchdog: -1}},
		{"name=decode", Options{Name: "decode"}},
		{"name = rank 0:gpu=1 ", Options{Name: "rank 0:gpu=1"}},
		{"name=", Options{}},
		{"history=100000", Options{History: 100000}},
		{"history=4194304", Options{History: 4194304}},
		{"history:0", Options{}},
		{"history=10,history_file=/tmp/oom history.json", Options{History: 10, HistoryFile: "/tmp/oom history.json"}},
		{"host_cache=false", Options{NoHostCache: true}},
		{"host_cache:True", Options{}},
		{"profile_rate=512KiB", Options{ProfileRate: 512 << 10}},
		{"profile_rate:1", Options{ProfileRate: 1}},
		{"profile_rate=0", Options{ProfileRate: -1}},
		{"memory_limit=40GiB", Options{MemoryLimit: 40 << 30}},
		{"memory_limit:4096", Options{MemoryLimit: 4096}},
		{"memory_fraction=0.05", Options{MemoryFraction: 0.05}},
		{"memory_fraction:1", Options{MemoryFraction: 1}},
		{"gc_threshold=0.8,memory_fraction=0.9", Options{GCThreshold: 0.8, MemoryFraction: 0.9}},
		{" expandable_segments:True , watchdog=2m, name=a, profile_rate=4k,", Options{ExpandableSegments: true, Watchdog: 2 * time.Minute, Name: "a", ProfileRate: 4 << 10}},
	} {
		const sentinel = 12345
		prev, _ := SetProfileRate(sentinel)
		got, err := ParseOptions(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.Equal(t, sentinel, currentProfileRate(), "%q: parsing changes nothing", tc.in)
		_, _ = SetProfileRate(prev)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	for _, tc := range []struct{ in, says string }{
		{"expandable_segment=true", `unknown key "expandable_segment"; did you mean expandable_segments?`},
		{"watchdgo=1s", `unknown key "watchdgo"; did you mean watchdog?`},
		{"max_split_size_mb=128", `unknown key "max_split_size_mb"`},
		{"capture_safety=strict", `unknown key "capture_safety"; capture_safety is a backend option: give it in the backend's config string (CAPALLOC_BACKEND=cuda:capture_safety=...)`},
		{"Watchdog=1s", `unknown key "Watchdog"; did you mean watchdog?`},
		{"expandable_segments", `"expandable_segments": want key=value`},
		{"=1", `unknown key ""`},
		{"watchdog=1s,watchdog=2s", "key watchdog given twice"},
		{"expandable_segments=maybe", `expandable_segments="maybe"`},
		{"expandable_segments=", `expandable_segments=""`},
		{"watchdog=soon", `watchdog="soon"`},
		{"watchdog=-5s", `watchdog="-5s"`},
		{"watchdog=30", `watchdog="30"`},
		{"history=-1", `history="-1"`},
		{"history=lots", `history="lots"`},
		{"history=9223372036854775807", `history="9223372036854775807": more than the maximum, 4194304 events`},
		{"history=4194305", "more than the maximum, 4194304 events"},
		{"history_file=\xff", "not valid UTF-8"},
		{"profile_rate=-1", `profile_rate="-1"`},
		{"profile_rate=fast", `profile_rate="fast"`},
		{"profile_rate=1.5MiB", `profile_rate="1.5MiB"`},
		{"name=\xff", "not valid UTF-8"},
		{"profile_rate=1,bogus=1", `unknown key "bogus"`},
		{"memory_limit=lots", `memory_limit="lots"`},
		{"memory_limit=-1", `memory_limit="-1"`},
		{"memory_fraction=0", `memory_fraction="0"`},
		{"memory_fraction=1.5", `memory_fraction="1.5"`},
		{"memory_fraction=NaN", `memory_fraction="NaN"`},
		{"gc_threshold=1", `gc_threshold="1"`},
		{"gc_threshold=-0.5", `gc_threshold="-0.5"`},
		{"memory_limt=1GiB", `unknown key "memory_limt"; did you mean memory_limit?`},
	} {
		got, err := ParseOptions(tc.in)
		require.ErrorIs(t, err, ErrInvalidValue, tc.in)
		var e *Error
		require.True(t, errors.As(err, &e), "%q: %T", tc.in, err)
		require.Equal(t, "ParseOptions", e.Op)
		require.Contains(t, err.Error(), tc.says, tc.in)
		require.Equal(t, Options{}, got, tc.in)
		if strings.Contains(tc.says, "unknown key") || strings.Contains(tc.says, "want key=value") {
			for _, k := range optionKeys {
				require.Contains(t, err.Error(), k.name+"="+k.form, "%q lists the keys and their forms", tc.in)
			}
		} else if !strings.Contains(tc.says, "twice") {
			require.Contains(t, err.Error(), "want ", tc.in)
		}
	}
}

func TestParseOptionsRoundTrips(t *testing.T) {
	for _, p := range []Options{
		{},
		{ExpandableSegments: true},
		{Watchdog: 1500 * time.Millisecond},
		{Watchdog: -1},
		{Name: "rank 3:decode=x"},
		{ProfileRate: -1},
		{ProfileRate: 1},
		{ProfileRate: 512 << 10},
		{ExpandableSegments: true, Watchdog: time.Hour, Name: "n", ProfileRate: 7},
		{History: 4096, HistoryFile: "/var/tmp/oom.json"},
		{MemoryLimit: 3 << 30, MemoryFraction: 0.25, GCThreshold: 0.6},
	} {
		s := formatOptions(p)
		got, err := parseOptions(s)
		require.NoError(t, err, s)
		require.Equal(t, p, got, s)
		// PyTorch's spelling reads the same.
		got, err = parseOptions(strings.NewReplacer("=", ":").Replace(s))
		if p.Name == "" {
			require.NoError(t, err, s)
			require.Equal(t, p, got, s)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(envAllocConf, "expandable_segments:True,watchdog=2m")
	got, err := OptionsFromEnv()
	require.NoError(t, err)
	require.Equal(t, Options{ExpandableSegments: true, Watchdog: 2 * time.Minute}, got)

	t.Setenv(envAllocConf, "")
	got, err = OptionsFromEnv()
	require.NoError(t, err)
	require.Equal(t, Options{}, got)

	t.Setenv(envAllocConf, "watchdgo=1s")
	_, err = OptionsFromEnv()
	require.ErrorIs(t, err, ErrInvalidValue)
	require.Contains(t, err.Error(), envAllocConf, "the error names the variable")
	require.Contains(t, err.Error(), "OptionsFromEnv")
}

// ParseOptions never panics; what it accepts formats to a string that
// reads back the same, and what it refuses is an *Error wrapping
// ErrInvalidValue. Seeds: the f.Add calls.
func FuzzParseOptions(f *testing.F) {
	for _, s := range []string{"", "expandable_segments:True,watchdog=30s,profile_rate=512KiB,name=x",
		"watchdog=off", "name=a:b=c", ",,", "=", ":", "profile_rate=9223372036854775807", "profile_rate=8589934592GiB",
		"watchdog=-1ns", "name=\xff", "expandable_segments=True,expandable_segments=False", "watchdog=1h2m3.5s",
		"history=9223372036854775807", "history=4194304", "history=1125899906842624"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		opts, err := ParseOptions(s)
		p, perr := parseOptions(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidValue)
			var e *Error
			require.True(t, errors.As(err, &e))
			require.Error(t, perr)
			return
		}
		require.NoError(t, perr)
		require.Equal(t, p, opts)
		if strings.Contains(p.Name, ",") {
			t.Fatalf("name %q holds the separator", p.Name)
		}
		again, err := parseOptions(formatOptions(p))
		require.NoError(t, err, "format of %q is %q", s, formatOptions(p))
		require.Equal(t, p, again, "format of %q is %q", s, formatOptions(p))
	})
}

// A boolean the parser refuses gets every form it accepts in the error,
// yes and on among them.
func TestParseOptionsBoolErrorListsEveryForm(t *testing.T) {
	_, err := ParseOptions("expandable_segments=maybe")
	require.ErrorIs(t, err, ErrInvalidValue)
	for _, form := range []string{"true|false", "1|0", "yes|no", "on|off", "any case"} {
		require.Contains(t, err.Error(), form)
	}
	opts, err := ParseOptions("expandable_segments=yes")
	require.NoError(t, err)
	require.True(t, opts.ExpandableSegments)
}
