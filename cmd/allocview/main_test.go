package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/histtest"
)

// The history written at an out-of-memory error becomes one
// self-contained HTML page: the timeline with the error marked and its
// reason, the sites, and the summary naming the failed request.
func TestRendersAnOutOfMemoryHistory(t *testing.T) {
	file := histtest.WriteOOMHistory(t)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{file}, &out, &errb), errb.String())
	html := strings.TrimSuffix(file, ".json") + ".html"
	require.Contains(t, out.String(), "wrote "+html)
	b, err := os.ReadFile(html)
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, "<h2>field-engine</h2>")
	require.Equal(t, 1, strings.Count(page, "<svg "), "one chart")
	require.Regexp(t, `<title>out of memory \(event \d+, [^)]*\): driver out of memory after the reclaim ladder</title>`, page)
	require.Contains(t, page, "histtest.WriteOOMHistory (histtest.go:", "the allocating site in the legend")
	require.Contains(t, page, "out-of-memory errors 1\n  event ")
	require.Contains(t, page, "a request of 2.00 MiB (2097152 B)")
	for _, external := range []string{"<script", "src=", "url(", "@import", "<link", `href="timeline`} {
		require.NotContains(t, page, external, "self-contained, no link to a server")
	}
	for _, u := range regexp.MustCompile(`https?://[^"'\s<]*`).FindAllString(page, -1) {
		require.Equal(t, "http://www.w3.org/2000/svg", u, "nothing fetched from outside")
	}

	out.Reset()
	require.Equal(t, 0, run([]string{"-o", "-", "-site", "WriteOOMHistory", "-baseline=out", file}, &out, &errb), errb.String())
	require.True(t, strings.HasPrefix(out.String(), "<!DOCTYPE html>"))
	require.Contains(t, out.String(), "Showing buffers of sites matching &#34;WriteOOMHistory&#34;")
}

// A file that is not a history is an error naming the file and the
// reason; nothing is written.
func TestRefusesABadFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"recorded":1,"events":[{"seq":0,"kind":"boom","stack":-1}]}`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{bad}, &out, &errb))
	require.Contains(t, errb.String(), `bad.json: memmap: invalid history: event 0 (seq 0): kind "boom"`)
	_, err := os.Stat(filepath.Join(dir, "bad.html"))
	require.True(t, os.IsNotExist(err), "nothing written")
	require.Equal(t, 2, run([]string{"-baseline=sideways", bad}, &out, &errb))
}
