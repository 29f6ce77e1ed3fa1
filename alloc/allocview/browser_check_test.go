//go:build browser

package allocview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// What the browser check finds wrong with a page: each fault it reports
// wraps one of these, with what it saw.
var (
	errOverflow = errors.New("horizontal overflow: the page is wider than the window")
	errMark     = errors.New("mark not drawn: fewer marks than expected, or one with no width")
	errText     = errors.New("text not shown")
	errUnwanted = errors.New("text shown that the page must not show")
	errTooltip  = errors.New("empty tooltip")
	errTinyText = fmt.Errorf("text drawn smaller than %d px", minTextPx)
	errImage    = errors.New("image not shown")
	errConsole  = errors.New("console error")
	errRequest  = errors.New("failed request")
	errFirst    = fmt.Errorf("not on the first screen (%d px)", firstScreenPx)
)

// pageFaults lists the kinds of fault, for tests of the check.
var pageFaults = []error{errOverflow, errMark, errText, errUnwanted, errTooltip, errTinyText, errImage, errConsole, errRequest, errFirst}

// firstScreenPx is the first screen's height: what a laptop's browser
// window, 1400 by 800 px, shows of a page before it is scrolled.
const firstScreenPx = 800

// minTextPx is the smallest an SVG text may be drawn, in CSS px: a
// drawing scaled to fit its window's height instead of its width (its
// text scaled with it) fails it.
const minTextPx = 9

// browserTab is a tab of a headless Chromium, and what its page logged
// since it was last navigated.
type browserTab struct {
	ctx    context.Context
	mu     sync.Mutex
	urls   map[network.RequestID]string // requests made, for naming those that fail
	logged []error                      // console errors and failed requests, as faults
}

// chromiumPath is the browser to drive: $CAPALLOC_CHROMIUM, or the first
// of Chromium's and Chrome's usual names on $PATH; empty when none is.
func chromiumPath() string {
	if p := os.Getenv("CAPALLOC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts one headless Chromium for the test and opens a tab,
// or skips the test, saying why, when no browser is installed. The
// browser is offline: it asks nothing of the network by itself (no
// update, sync, QUIC or background fetch), and the test points it only at
// loopback addresses. It is stopped at the test's end.
func startBrowser(t *testing.T) *browserTab {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("no Chromium found: install one (Debian: apt-get install chromium) or set CAPALLOC_CHROMIUM to its path")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("hide-scrollbars", true), // the screenshots show the page, not a scroll bar
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers' /dev/shm is small
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("mute-audio", true),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	parent, stop := context.WithTimeout(context.Background(), 5*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit, before t.TempDir is removed
		stop()
	})
	if err := chromedp.Do(ctx); err != nil { // a browser that exits at start: the error holds its output
		t.Fatalf("starting %s: %v", path, err)
	}
	tab := &browserTab{ctx: ctx, urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(ctx, tab.record); err != nil {
		t.Fatalf("listening to the tab: %v", err)
	}
	return tab
}

// record keeps what the page logs: console errors and assertions,
// uncaught exceptions, the browser's error entries, requests that fail
// or answer 400 or more. It runs in the tab's event loop: no command.
func (b *browserTab) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.urls[ev.RequestID] = ev.Request.URL
	case *network.EventResponseReceived:
		if ev.Response.Status >= 400 && !browsersOwn(ev.Response.URL) {
			b.logged = append(b.logged, fmt.Errorf("%w: %s answered %d %s", errRequest, ev.Response.URL, ev.Response.Status, ev.Response.StatusText))
		}
	case *network.EventLoadingFailed:
		if browsersOwn(b.urls[ev.RequestID]) {
			return
		}
		b.logged = append(b.logged, fmt.Errorf("%w: %s: %s", errRequest, b.urls[ev.RequestID], ev.ErrorText))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			b.logged = append(b.logged, fmt.Errorf("%w: console.%s(%s)", errConsole, ev.Type, strings.Join(args, ", ")))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			text += " " + d.Exception.Description
		}
		b.logged = append(b.logged, fmt.Errorf("%w: uncaught %s (%s:%d)", errConsole, text, d.URL, d.LineNumber+1))
	case *cdplog.EventEntryAdded:
		// A resource that failed to load is also a network event (above);
		// every other error entry is the page's.
		if ev.Entry.Level == cdplog.EntryLevelError && ev.Entry.Source != cdplog.EntrySourceNetwork {
			b.logged = append(b.logged, fmt.Errorf("%w: %s: %s (%s)", errConsole, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// browsersOwn reports whether a request is the browser's own rather than
// the page's: the site's icon, which Chromium asks for at the root of
// every page's origin (also for an SVG or a text file, which cannot name
// another) and an engine's private mux need not serve.
func browsersOwn(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Path == "/favicon.ico"
}

// pageFacts is what the page reports of itself (factsScript).
type pageFacts struct {
	ScrollWidth float64 `json:"scrollWidth"`
	InnerWidth  float64 `json:"innerWidth"`
	Marks       []struct {
		Selector string   `json:"selector"`
		Count    int      `json:"count"`
		NoWidth  []string `json:"noWidth"` // the first few drawn with no width
	} `json:"marks"`
	Text          string   `json:"text"`
	TinyText      []string `json:"tinyText"` // the first few SVG texts drawn under minTextPx
	Tooltips      int      `json:"tooltips"`
	EmptyTooltips []string `json:"emptyTooltips"`
	BadImages     []string `json:"badImages"`
	// Folded is the text of the page's <details> as shown when opened.
	Folded string `json:"folded"`
	// Starts: per selector of pageWant.first, how far below the page's
	// top its first element starts, in CSS px; -1 for none.
	Starts []struct {
		Selector string  `json:"selector"`
		Top      float64 `json:"top"`
	} `json:"starts"`
}

// factsScript measures the page in the browser; %s is the JSON array of
// the selectors of the marks to measure, %d minTextPx, %s the JSON array
// of the selectors whose start to measure (pageWant.first). The page may be
// HTML (its text is body.innerText) or an SVG document (no body); SVG
// text counts when drawn with a size, without the tooltips (<title>) it
// holds, and its size is its font's times the scale it is drawn at.
const factsScript = `(() => {
  const selectors = %s;
  const describe = el => el.outerHTML.slice(0, 160);
  const root = document.documentElement;
  const facts = {
    scrollWidth: Math.max(root.scrollWidth, document.body ? document.body.scrollWidth : 0),
    innerWidth: window.innerWidth,
    marks: selectors.map(sel => {
      const els = [...document.querySelectorAll(sel)];
      return {selector: sel, count: els.length,
        noWidth: els.filter(el => !(el.getBoundingClientRect().width > 0)).slice(0, 5).map(describe)};
    }),
  };
  const drawn = [...document.querySelectorAll('text')]
    .filter(el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  const px = el => { const m = el.getScreenCTM(); return parseFloat(getComputedStyle(el).fontSize) * Math.hypot(m.a, m.b); };
  facts.tinyText = drawn.filter(el => px(el) < %d).slice(0, 5).map(el => el.textContent.slice(0, 60) + ' (' + px(el).toFixed(1) + ' px)');
  const svgText = drawn.map(el => [...el.childNodes].filter(n => n.nodeType === Node.TEXT_NODE || n.localName === 'tspan').map(n => n.textContent).join(''));
  facts.text = [document.body ? document.body.innerText : '', ...svgText].join(' ').replace(/\s+/g, ' ');
  const tips = [...document.querySelectorAll('title')].filter(el => !el.closest('head'));
  facts.tooltips = tips.length;
  facts.emptyTooltips = tips.filter(el => el.textContent.trim() === '').slice(0, 5).map(el => describe(el.parentNode));
  facts.badImages = [...document.images]
    .filter(img => !(img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 0))
    .map(img => img.src + ' (' + (img.complete ? 'loaded' : 'loading') + ', natural width ' + img.naturalWidth + ', drawn ' + img.getBoundingClientRect().width + ' px)');
  facts.starts = %s.map(sel => {
    const el = document.querySelector(sel);
    return {selector: sel, top: el ? el.getBoundingClientRect().top + window.scrollY : -1};
  });
  // The folded text, read with every <details> open, then closed again.
  const details = [...document.querySelectorAll('details')];
  const closed = details.filter(d => !d.open);
  closed.forEach(d => { d.open = true; });
  facts.folded = details.map(d => d.innerText).join(' ').replace(/\s+/g, ' ');
  closed.forEach(d => { d.open = false; });
  return facts;
})()`

// check loads pageURL in a window width px wide and returns what the page
// reported and its faults (errors.Join of errors wrapping the errors
// above), or nil.
func (b *browserTab) check(pageURL string, width int, want pageWant) (pageFacts, error) {
	b.mu.Lock()
	b.logged, b.urls = nil, map[network.RequestID]string{}
	b.mu.Unlock()
	if err := chromedp.Do(b.ctx,
		chromedp.EmulateViewport(int64(width), 900),
		chromedp.Navigate(pageURL),
	); err != nil {
		return pageFacts{}, fmt.Errorf("loading %s: %w", pageURL, err)
	}
	sels, err := keysJSON(want.marks)
	if err != nil {
		return pageFacts{}, err
	}
	starts, err := keysJSON(want.first)
	if err != nil {
		return pageFacts{}, err
	}
	facts, err := chromedp.Run(b.ctx, chromedp.Evaluate[pageFacts](fmt.Sprintf(factsScript, sels, minTextPx, starts)))
	if err != nil {
		return facts, fmt.Errorf("measuring %s: %w", pageURL, err)
	}
	var faults []error
	if facts.ScrollWidth > facts.InnerWidth {
		faults = append(faults, fmt.Errorf("%w: %.0f px wide in a %.0f px window", errOverflow, facts.ScrollWidth, facts.InnerWidth))
	}
	for _, m := range facts.Marks {
		if m.Count < want.marks[m.Selector] {
			faults = append(faults, fmt.Errorf("%w: %d %q, want at least %d", errMark, m.Count, m.Selector, want.marks[m.Selector]))
		}
		for _, el := range m.NoWidth {
			faults = append(faults, fmt.Errorf("%w: %s", errMark, el))
		}
	}
	for _, s := range want.texts {
		if !strings.Contains(facts.Text, strings.Join(strings.Fields(s), " ")) {
			faults = append(faults, fmt.Errorf("%w: %q", errText, s))
		}
	}
	for _, s := range want.folded {
		if !strings.Contains(facts.Folded, strings.Join(strings.Fields(s), " ")) {
			faults = append(faults, fmt.Errorf("%w: %q, folded in a <details>", errText, s))
		}
	}
	for _, st := range facts.Starts {
		if st.Top < 0 || st.Top > firstScreenPx {
			faults = append(faults, fmt.Errorf("%w: %s (%s) starts %.0f px down", errFirst, st.Selector, want.first[st.Selector], st.Top))
		}
	}
	for _, s := range want.absent {
		if strings.Contains(facts.Text, strings.Join(strings.Fields(s), " ")) {
			faults = append(faults, fmt.Errorf("%w: %q", errUnwanted, s))
		}
	}
	if facts.Tooltips < want.tooltips {
		faults = append(faults, fmt.Errorf("%w: %d tooltips, want at least %d", errTooltip, facts.Tooltips, want.tooltips))
	}
	for _, el := range facts.EmptyTooltips {
		faults = append(faults, fmt.Errorf("%w: on %s", errTooltip, el))
	}
	for _, el := range facts.TinyText {
		faults = append(faults, fmt.Errorf("%w: %s", errTinyText, el))
	}
	for _, img := range facts.BadImages {
		faults = append(faults, fmt.Errorf("%w: %s", errImage, img))
	}
	b.mu.Lock()
	faults = append(faults, b.logged...)
	b.mu.Unlock()
	if err := errors.Join(faults...); err != nil {
		return facts, fmt.Errorf("%s at %d px: %w", pageURL, width, err)
	}
	return facts, nil
}

// keysJSON is m's keys, sorted, as a JSON array ([] for none).
func keysJSON[V any](m map[string]V) ([]byte, error) {
	keys := slices.Sorted(maps.Keys(m))
	if keys == nil {
		keys = []string{}
	}
	return json.Marshal(keys)
}

// String sums the facts up for the test's log.
func (f pageFacts) String() string {
	s := fmt.Sprintf("%.0f of %.0f px wide, %d tooltips", f.ScrollWidth, f.InnerWidth, f.Tooltips)
	for _, m := range f.Marks {
		s += fmt.Sprintf(", %d %q", m.Count, m.Selector)
	}
	for _, st := range f.Starts {
		s += fmt.Sprintf(", %q starts %.0f px down", st.Selector, st.Top)
	}
	return s + fmt.Sprintf(", %d characters of text", len(f.Text))
}

// screenshot is a PNG of the page loaded last: the window's width, the
// page's height up to maxHeight px. An SVG document's height is its
// drawing's (the layout's content size is only the window's there).
func (b *browserTab) screenshot(maxHeight float64) ([]byte, error) {
	size, err := chromedp.Run(b.ctx, chromedp.Evaluate[[2]float64](`(() => {
  const root = document.documentElement;
  return [window.innerWidth, Math.max(root.scrollHeight, root.getBoundingClientRect().height)];
})()`))
	if err != nil {
		return nil, err
	}
	return chromedp.Run(b.ctx, chromedp.Action[[]byte](func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		yes := true
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{Width: size[0], Height: math.Ceil(min(size[1], maxHeight)), Scale: 1},
			CaptureBeyondViewport: &yes,
			FromSurface:           &yes,
		})
		return r.Data, err
	}))
}
