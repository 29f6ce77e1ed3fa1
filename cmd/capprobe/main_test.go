package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/probe"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	plugin.ServeIfChild() // the plugin:cpu test runs this binary as its backend
	os.Exit(m.Run())
}

// checkedRows runs the probe on backend in every mode with -check and
// -json, requires it to pass, and returns its rows.
func checkedRows(t *testing.T, backend string, replays int) []map[string]any {
	t.Helper()
	var out, errb bytes.Buffer
	code := run([]string{"-backend=" + backend, "-mode=all", "--json", "-check", "-replays=" + strconv.Itoa(replays)}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rows))
	return rows
}

func TestJSONEveryModeMatchesCUDARules(t *testing.T) {
	rows := checkedRows(t, "cpu", 5)
	require.Len(t, rows, 3*(len(probe.Ops())+len(probe.CollectiveOps())), "cpu runs the collective rows too")
	for _, r := range rows {
		for _, k := range []string{"op", "verdict", "error", "mode", "expected"} {
			require.Contains(t, r, k)
		}
		require.Equal(t, r["expected"], r["verdict"], "%v", r)
		if r["verdict"] == string(probe.NotCapturable) {
			require.NotEmpty(t, r["error"], "a refusal must carry its reason: %v", r)
		}
	}
}

func TestTableHasOneRowPerOperation(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"-replays=2"}, &out, &errb), errb.String())
	for _, op := range append(probe.Ops(), probe.CollectiveOps()...) {
		require.Contains(t, out.String(), op)
	}
	require.Contains(t, out.String(), "pageable", "upload_pageable's reason names the cause")
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "workspace_lazy") {
			require.Contains(t, line, "first allocated inside the capture", "the lazy workspace's warning is in its row")
		}
	}
	require.Empty(t, errb.String(), "warnings belong in the table, not on stderr")
}

func TestBadFlagsAndUnknownBackend(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"-mode=sideways"}, &out, &errb))
	require.Equal(t, "capprobe: invalid value: unknown capture mode \"sideways\" (want global, threadlocal, relaxed or all)\n", errb.String())
	errb.Reset()
	require.Equal(t, 1, run([]string{"-backend=no-such-gpu"}, &out, &errb))
	require.True(t, strings.Contains(errb.String(), "unknown backend") && strings.Contains(errb.String(), "cpu"), errb.String())
}

func TestFallbackChainSaysWhatWasSkipped(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"-backend=no-such-gpu;cpu:memory_limit=256MiB", "-replays=2"}, &out, &errb), errb.String())
	require.Contains(t, errb.String(), "backend cpu:memory_limit=256MiB; skipped no-such-gpu")
	errb.Reset()
	require.Equal(t, 1, run([]string{"-backend=cpu:memroy_limit=1GiB"}, &out, &errb))
	require.Contains(t, errb.String(), "memory_limit", "a typo names the known options")
}

func TestProbeOutOfProcessMatchesCUDARules(t *testing.T) {
	rows := checkedRows(t, "plugin:cpu", 3)
	require.Len(t, rows, 3*len(probe.Ops()), "no collective rows: a plugin cannot run host functions")
	for _, r := range rows {
		require.Equal(t, r["expected"], r["verdict"], "%v", r)
	}
}

// writes records each Write separately.
type writes struct{ got []string }

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, string(p))
	return len(p), nil
}

// The table's header says how many rows are coming, and each row is
// written on its own as it finishes (probe.Stream hands them over one by
// one: TestStreamHandsRowsOverAsTheyFinish in package probe).
func TestTableSaysHowManyRowsAndPrintsEach(t *testing.T) {
	var out writes
	var errb bytes.Buffer
	require.Equal(t, 0, run([]string{"-mode=all", "-replays=1"}, &out, &errb), errb.String())
	header := out.got[0]
	m := regexp.MustCompile(`: (\d+) rows \((\d+) operations x 3 modes\), each printed as it finishes`).FindStringSubmatch(header)
	require.NotNil(t, m, header)
	n, _ := strconv.Atoi(m[1])
	ops := append(probe.Ops(), probe.CollectiveOps()...)
	require.Equal(t, 3*len(ops), n)
	require.True(t, strings.HasPrefix(out.got[1], "MODE "), out.got[1])
	rows := out.got[2:]
	require.Len(t, rows, n, "as many rows as the header said, one write each")
	for i, r := range rows {
		require.Equal(t, 1, strings.Count(r, "\n"), r)
		require.Contains(t, r, " "+ops[i%len(ops)]+" ", "row %d in OpsFor's order", i)
		require.Equal(t, strings.TrimRight(r, " \n"), strings.TrimSuffix(r, "\n"), "no trailing blanks")
	}
}

func TestBackendsListsWhatOpensHere(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"-backends"}, &out, &errb), errb.String())
	lines := strings.Split(out.String(), "\n")
	require.Regexp(t, `^BACKEND +OPENS HERE$`, lines[0])
	// Each backend that opens shows its device and safety profile
	// (docs/capture-safety.md); through the plugin, the child's.
	require.Contains(t, lines, "cpu         yes: cpu (emulated), capture safety documented (emulated)")
	require.Contains(t, lines, "plugin:cpu  yes: cpu (emulated), capture safety documented (emulated)", "the plugin layer over cpu, as the conformance suite's default run")
	for _, n := range []string{"cuda", "hip"} {
		require.Regexp(t, "(?m)^"+n+" +(yes|no: backend unavailable: "+n+": .+)$", out.String(), "every linked backend is listed, with why it does not open")
	}
	require.Empty(t, errb.String())
}
