//go:build browser

package allocview

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// The browser test (docs/allocation-history.md, "The pages in a
// browser"): every page of the views, over the workload, in headless
// Chromium at each of browserWidths. Run it with
//
//	go test -tags browser -run TestBrowser ./alloc/allocview
//
// and with CAPALLOC_SCREENSHOTS=docs it also writes the screenshots docs/
// shows (the directory is read from the module's root).

// browserWidths are the window widths every page is loaded at: a laptop's
// browser, and a half screen.
var browserWidths = [2]int{1400, 800}

// shotMaxHeight bounds a screenshot's height: the page's top, where
// what the docs describe is.
const shotMaxHeight = 1800

// viewFactsOf reads the workload's allocators as the views do.
func viewFactsOf(t *testing.T, w *workload) viewFacts {
	var f viewFacts
	for _, a := range []*alloc.Allocator{w.decoder, w.prefill} {
		s, err := a.Snapshot()
		require.NoError(t, err)
		f.snaps = append(f.snaps, s)
		// the window the pages show by default
		h := historyOf(a, DefaultMaxEvents)
		f.histories = append(f.histories, h)
	}
	return f
}

// screenshotDir is $CAPALLOC_SCREENSHOTS, a relative path read from the
// module's root; empty when unset.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("CAPALLOC_SCREENSHOTS")
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return filepath.Join(root, dir)
		}
		up := filepath.Dir(root)
		require.NotEqual(t, up, root, "no go.mod above the test's directory")
		root = up
	}
}

// TestBrowser loads every page of the views over the workload in
// headless Chromium, at both widths, and checks it in the browser (no
// horizontal overflow, every mark drawn, its text shown and readable,
// no empty tooltip, no console error, no failed request); with
// CAPALLOC_SCREENSHOTS set it writes their screenshots there. Then it
// checks that the check catches broken pages.
func TestBrowser(t *testing.T) {
	tab := startBrowser(t)
	w := newWorkload(t)
	require.Equal(t, []*alloc.Allocator{w.decoder, w.prefill}, chosen(nil), "the views list the workload's allocators, and only them, in this order")
	facts := viewFactsOf(t, w)

	mux := http.NewServeMux()
	mux.Handle(Prefix, withBrokenPages(Handler()))
	srv := httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(srv.Close)
	base := srv.URL + Prefix
	shots := screenshotDir(t)

	for _, p := range viewPages {
		for i, width := range browserWidths {
			t.Run(fmt.Sprintf("%s/%d", p.name, width), func(t *testing.T) {
				f, err := tab.check(p.url(t, base, w), width, p.want(facts))
				require.NoError(t, err)
				t.Log(f)
				if shots == "" || p.shots[i] == "" {
					return
				}
				png, err := tab.screenshot(shotMaxHeight)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(shots, p.shots[i]), png, 0o644))
			})
		}
	}

	// The check itself: each broken page fails it with its fault, and
	// only that one.
	for _, c := range brokenCases {
		t.Run("catches/"+c.name, func(t *testing.T) {
			p := viewPages[slices.IndexFunc(viewPages, func(p viewPage) bool { return p.name == c.page })]
			want := p.want(facts)
			if c.text != "" {
				want.texts = append(want.texts, c.text)
			}
			if c.absent != "" {
				want.absent = append(want.absent, c.absent)
			}
			_, err := tab.check(base+"?broken="+c.name, browserWidths[1], want)
			require.Error(t, err)
			for _, kind := range pageFaults {
				require.Equal(t, slices.Contains(c.faults, kind), errors.Is(err, kind), "fault %q in:\n%v", kind, err)
			}
		})
	}
}

// brokenCase is a page of the views with one thing broken, and the
// faults the check must find in it at the narrower width.
type brokenCase struct {
	name, page string
	view       string // the view it breaks
	// old, a regular expression: its first match in the view's body
	// becomes new (regexp.Expand).
	old, new string
	text     string // a text the check is told to want that the page does not show
	absent   string // a text the check is told the page must not show, which it does
	faults   []error
}

var brokenCases = []brokenCase{
	{name: "overflow", page: "index", view: "", old: "<body>", new: `<body><div style="width:1000px;height:8px;background:#d62728"></div>`, faults: []error{errOverflow}},
	{name: "overflow-svg", page: "map", view: "segments.svg", old: `width="100%"`, new: `width="1000"`, faults: []error{errOverflow}},
	{name: "map-fit-to-window", page: "map", view: "segments.svg", old: ` style="height:auto"`, new: ``, faults: []error{errTinyText}},
	{name: "zero-width-block", page: "map", view: "segments.svg", old: `(<rect class="blk" x="[^"]*" y="[^"]*" width=")[^"]*"`, new: `${1}0"`, faults: []error{errMark}},
	{name: "empty-tooltip", page: "timeline", view: "timeline", old: "</svg>", new: `<rect x="0" y="0" width="10" height="10"><title> </title></rect></svg>`, faults: []error{errTooltip}},
	{name: "missing-text", page: "summary", view: "summary.txt", text: "a figure the page does not show", faults: []error{errText}},
	{name: "unwanted-text", page: "summary", view: "summary.txt", absent: "capalloc memory summary", faults: []error{errUnwanted}},
	{name: "unfolded", page: "index", view: "", old: "<details>", new: "<details open>", faults: []error{errFirst}},
	{name: "console-error", page: "index", view: "", old: "</body>", new: `<script>console.error("broken")</script></body>`, faults: []error{errConsole}},
	{name: "exception", page: "index", view: "", old: "</body>", new: `<script>null.x</script></body>`, faults: []error{errConsole}},
	{name: "missing-image", page: "index", view: "", old: "</body>", new: `<img src="no-such-view.svg" alt="x"></body>`, faults: []error{errRequest, errImage}},
	{name: "refused-request", page: "index", view: "", old: "</body>", new: `<img src="http://127.0.0.1:1/refused.svg" alt="x"></body>`, faults: []error{errRequest, errImage}},
}

// withBrokenPages serves each brokenCase at ?broken=NAME, beside the
// views h serves: its view with the edit made. Served where the views
// are, its relative links reach them as the view's own do.
func withBrokenPages(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("broken")
		if name == "" {
			h.ServeHTTP(w, r)
			return
		}
		i := slices.IndexFunc(brokenCases, func(c brokenCase) bool { return c.name == name })
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		c := brokenCases[i]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Prefix+c.view, nil))
		body := rec.Body.String()
		if c.old != "" {
			re := regexp.MustCompile(c.old)
			m := re.FindStringSubmatchIndex(body)
			if m == nil {
				http.Error(w, fmt.Sprintf("the %s view has no %q to break", c.page, c.old), http.StatusInternalServerError)
				return
			}
			body = body[:m[0]] + string(re.ExpandString(nil, c.new, body, m)) + body[m[1]:]
		}
		w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
		fmt.Fprint(w, body)
	})
}
