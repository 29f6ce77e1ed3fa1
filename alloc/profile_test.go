package alloc_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/internal/registry"
)

// newNamed makes an allocator called name on a fresh cpu driver, closed
// (and the driver with it) when the test ends.
func newNamed(t testing.TB, name string) *alloc.Allocator {
	t.Helper()
	return alloctest.New(t, newCPU(t, 1<<30), alloc.Options{Name: name})
}

// recordEvery turns recording of every allocation on for the test.
func recordEvery(t testing.TB, rate int) {
	t.Helper()
	prev, err := alloc.SetProfileRate(rate)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = alloc.SetProfileRate(prev) })
}

func parseProfile(t *testing.T, write func(io.Writer) error) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, write(&buf))
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	return p
}

// leafOwner sums a profile's values by (leaf function, owner label).
type siteOwner struct{ leaf, owner string }

func byLeaf(p *profile.Profile) map[siteOwner][4]int64 {
	out := map[siteOwner][4]int64{}
	for _, s := range p.Sample {
		l := s.Location[0].Line[0].Function.Name
		k := siteOwner{l, s.Label["owner"][0]}
		v := out[k]
		for i := range v {
			v[i] += s.Value[i]
		}
		out[k] = v
	}
	return out
}

const testPkg = "github.com/capalloc/capalloc/alloc_test."

//go:noinline
func loadWeights(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

//go:noinline
func scratchSync(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.AllocSync(n) }

//go:noinline
func reserveAttention(a *alloc.Allocator, n int64) (alloc.Buffer, error) {
	return a.Workspace("attn", n)
}

//go:noinline
func pinInputs(a *alloc.Allocator, n int64) (*alloc.HostBuffer, error) { return a.HostAlloc(n) }

//go:noinline
func kvCache(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

//go:noinline
func stepTemp(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

// Every allocation recorded: the profile's leaves are this test's own
// allocation sites, each labelled with who holds the memory now, and the
// freed ones count in alloc_* only.
func TestProfileNamesTheCallSites(t *testing.T) {
	recordEvery(t, 1)
	a := newNamed(t, "profile-sites")
	w, err := loadWeights(a, 3<<20)
	require.NoError(t, err)
	s, err := scratchSync(a, 1<<20)
	require.NoError(t, err)
	_, err = reserveAttention(a, 256<<10)
	require.NoError(t, err)
	h, err := pinInputs(a, 8<<10)
	require.NoError(t, err)
	kv, err := kvCache(a, 64<<10) // freed inside the capture: held for the graph
	require.NoError(t, err)
	for range 3 { // allocated and freed: alloc_* only
		b, err := stepTemp(a, 4<<10)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	var inGraph alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(kv, 0, h, 0, 4<<10); err != nil {
			return err
		}
		if err := a.Free(kv); err != nil {
			return err
		}
		var err error
		inGraph, err = stepTemp(a, 128<<10)
		return err
	})
	require.NoError(t, err)

	p := parseProfile(t, a.WriteProfile)
	require.Equal(t, "inuse_space", p.DefaultSampleType)
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type)
	}
	require.Equal(t, []string{"inuse_space", "inuse_objects", "alloc_space", "alloc_objects"}, types)
	got := byLeaf(p)
	want := map[siteOwner][4]int64{
		{testPkg + "loadWeights", "pool-live"}:      {3 << 20, 1, 3 << 20, 1},
		{testPkg + "scratchSync", "sync-live"}:      {1 << 20, 1, 1 << 20, 1},
		{testPkg + "reserveAttention", "workspace"}: {256 << 10, 1, 256 << 10, 1},
		{testPkg + "pinInputs", "pinned-host"}:      {8 << 10, 1, 8 << 10, 1},
		{testPkg + "kvCache", "pool-live"}:          {0, 0, 64 << 10, 1},
		{testPkg + "kvCache", "held-for-graph"}:     {64 << 10, 1, 0, 0},
		{testPkg + "stepTemp", "pool-live"}:         {0, 0, 3 * 4 << 10, 3},
		{testPkg + "stepTemp", "graph-owned"}:       {128 << 10, 1, 128 << 10, 1},
	}
	require.Equal(t, want, got)
	for _, s := range p.Sample {
		require.Equal(t, []string{"profile-sites"}, s.Label["allocator"])
		require.Equal(t, []string{"cpu"}, s.Label["backend"])
		require.Equal(t, []string{a.Info().Name}, s.Label["device"])
		caller := s.Location[1].Line[0].Function.Name
		require.Equal(t, testPkg+"TestProfileNamesTheCallSites", strings.TrimSuffix(caller, ".func1"), "the stack goes on into the test")
	}

	// Closing the graph releases what it owned and held; freeing the rest
	// leaves only alloc_* figures.
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(w))
	require.NoError(t, a.Free(s))
	require.NoError(t, a.ReleaseWorkspace("attn"))
	require.NoError(t, h.Close())
	_ = inGraph
	for k, v := range byLeaf(parseProfile(t, a.WriteProfile)) {
		require.Zero(t, v[0], "%v still in use", k)
		require.Zero(t, v[1], "%v still in use", k)
	}
}

// Sampled by size at a rate, the weighted samples estimate what was
// allocated: 1000 buffers of 64 KiB at one sample per 64 KiB (each
// sampled with probability 1-1/e) come out within 15% of 62.5 MiB
// (the estimate's spread is 2.4%).
func TestProfileSampledEstimate(t *testing.T) {
	recordEvery(t, 64<<10)
	a := newNamed(t, "profile-rate")
	var bufs []alloc.Buffer
	for range 1000 {
		b, err := loadWeights(a, 64<<10)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	p := parseProfile(t, a.WriteProfile)
	require.EqualValues(t, 64<<10, p.Period)
	v := byLeaf(p)[siteOwner{testPkg + "loadWeights", "pool-live"}]
	const total = 1000 * 64 << 10
	require.InDelta(t, total, v[0], 0.15*total, "inuse_space")
	require.InDelta(t, 1000, v[1], 150, "inuse_objects")
	require.Less(t, len(p.Sample), 2, "one site, one owner")
	for _, b := range bufs {
		require.NoError(t, a.Free(b))
	}
}

// Off (the default), nothing is sampled: the profile is valid, empty, and
// says how to turn recording on. A negative rate is refused.
func TestProfileOff(t *testing.T) {
	recordEvery(t, 0)
	a := newNamed(t, "profile-off")
	b, err := loadWeights(a, 1<<20)
	require.NoError(t, err)
	defer a.Free(b)
	p := parseProfile(t, a.WriteProfile)
	require.Empty(t, p.Sample)
	require.True(t, slices.ContainsFunc(p.Comments, func(c string) bool { return strings.Contains(c, "alloc.SetProfileRate") }), "%q", p.Comments)

	_, err = alloc.SetProfileRate(-1)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Equal(t, 0, registry.ProfileRate())
}

// The process's profile covers every open allocator, each sample
// labelled with its allocator; a closed allocator's profile is refused.
func TestProcessProfileCoversEveryAllocator(t *testing.T) {
	recordEvery(t, 1)
	x, y := newNamed(t, "proc-x"), newNamed(t, "proc-y")
	bx, err := loadWeights(x, 1<<20)
	require.NoError(t, err)
	by, err := kvCache(y, 2<<20)
	require.NoError(t, err)
	p := parseProfile(t, alloc.WriteProfile)
	bytesOf := map[string]int64{}
	for _, s := range p.Sample {
		bytesOf[s.Label["allocator"][0]+" "+s.Location[0].Line[0].Function.Name] += s.Value[0]
	}
	require.EqualValues(t, 1<<20, bytesOf["proc-x "+testPkg+"loadWeights"])
	require.EqualValues(t, 2<<20, bytesOf["proc-y "+testPkg+"kvCache"])
	require.NoError(t, x.Free(bx))
	require.NoError(t, y.Free(by))

	d := newCPU(t, 0)
	z, err := alloc.New(d, alloc.Options{Name: "proc-z"})
	require.NoError(t, err)
	require.NoError(t, z.Close())
	err = z.WriteProfile(&bytes.Buffer{})
	require.ErrorIs(t, err, alloc.ErrClosed)
	require.Nil(t, registry.Lookup("proc-z"), "a closed allocator leaves the registry")
}

// `go tool pprof -top` reads the profile as it is (no binary needed: the
// functions and lines are in it) and names this test's allocation sites.
func TestGoToolPprofTop(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to run go tool pprof:", err)
	}
	recordEvery(t, 1)
	a := newNamed(t, "pprof-top")
	w, err := loadWeights(a, 3<<20)
	require.NoError(t, err)
	defer a.Free(w)
	_, err = reserveAttention(a, 1<<20)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "device.pb.gz")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, a.WriteProfile(f))
	require.NoError(t, f.Close())
	out, err := exec.Command(goTool, "tool", "pprof", "-top", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("go tool pprof -top:\n%s", out)
	require.Contains(t, string(out), "Type: inuse_space")
	for _, site := range []string{"alloc_test.loadWeights", "alloc_test.reserveAttention"} {
		require.Regexp(t, `(?m)^\s+\d+(\.\d+)?[KMG]?B\s.*`+regexp.QuoteMeta(site)+`$`, string(out), "flat bytes on the site's own line")
	}
	out, err = exec.Command(goTool, "tool", "pprof", "-top", "-tagfocus=owner=workspace", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "reserveAttention")
	require.NotContains(t, string(out), "loadWeights", "the owner label filters")
}
