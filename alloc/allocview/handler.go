package allocview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// views are the paths Handler serves, relative to where it is mounted.
var views = []string{"", "segments.svg", "profile", "snapshot.json", "summary.txt", "history.json", "timeline"}

// Handler serves the views (package doc) relative to where it is mounted:
// the index at the mount point itself (ending in "/"), the others by
// their last path element.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, r *http.Request) {
	view := ""
	if !strings.HasSuffix(r.URL.Path, "/") {
		view = path.Base(r.URL.Path)
	}
	var one *alloc.Allocator
	if name, ok := r.URL.Query()["allocator"]; ok {
		if one = registry.Lookup(name[0]); one == nil {
			notFound(w, fmt.Sprintf("no open allocator named %q", name[0]))
			return
		}
	}
	switch view {
	case "":
		serveIndex(w, r, one)
	case "segments.svg":
		serveSegments(w, one)
	case "profile":
		serveProfile(w, one)
	case "snapshot.json":
		serveSnapshot(w, r, one)
	case "summary.txt":
		serveSummary(w, one)
	case "history.json", "timeline":
		serveHistory(w, r, view, one)
	default:
		http.Error(w, fmt.Sprintf("allocview: no view %q; views: index (the mount point), %s", view, strings.Join(views[1:], ", ")), http.StatusNotFound)
	}
}

// notFound answers an unknown allocator with the names of the open ones.
func notFound(w http.ResponseWriter, why string) {
	var names []string
	for _, a := range registry.Allocators() {
		names = append(names, strconv.Quote(registry.Name(a)))
	}
	known := "none is open"
	if len(names) > 0 {
		known = "open allocators: " + strings.Join(names, ", ")
	}
	http.Error(w, "allocview: "+why+"; "+known, http.StatusNotFound)
}

// chosen is the allocator asked for, or every open one.
func chosen(one *alloc.Allocator) []*alloc.Allocator {
	if one != nil {
		return []*alloc.Allocator{one}
	}
	return registry.Allocators()
}

// snapshots takes the snapshots of as (cached: snapshotOf), leaving out
// any closed meanwhile.
func snapshots(as []*alloc.Allocator) []memmap.Snapshot {
	out := make([]memmap.Snapshot, 0, len(as))
	for _, a := range as {
		if s, err := snapshotOf(a); err == nil {
			out = append(out, s)
		}
	}
	return out
}

func serveProfile(w http.ResponseWriter, one *alloc.Allocator) {
	var buf bytes.Buffer
	var err error
	if one != nil {
		err = one.WriteProfile(&buf)
	} else {
		err = alloc.WriteProfile(&buf)
	}
	if err != nil {
		http.Error(w, "allocview: "+err.Error(), http.StatusInternalServerError) // closed meanwhile
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="capalloc-device.pb.gz"`)
	w.Header().Set("X-Capalloc-Profile-Rate", strconv.Itoa(registry.ProfileRate()))
	w.Write(buf.Bytes())
}

func serveSnapshot(w http.ResponseWriter, r *http.Request, one *alloc.Allocator) {
	max := DefaultMaxBlocks
	if v := r.URL.Query().Get("max_blocks"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("allocview: max_blocks=%q: want a count of blocks", v), http.StatusBadRequest)
			return
		}
		max = n
	}
	var snaps []memmap.Snapshot
	if one != nil {
		s, err := snapshotOf(one)
		if err != nil {
			http.Error(w, "allocview: "+err.Error(), http.StatusInternalServerError)
			return
		}
		snaps = []memmap.Snapshot{s}
	} else {
		snaps = snapshots(registry.Allocators())
	}
	snaps, listed, total := limitBlocks(snaps, max)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Capalloc-Blocks", fmt.Sprintf("%d of %d", listed, total))
	var v any = snaps
	if one != nil {
		v = snaps[0]
	}
	_ = json.NewEncoder(w).Encode(v) // straight to the client; a failed write is theirs
}

func serveSegments(w http.ResponseWriter, one *alloc.Allocator) {
	var buf bytes.Buffer
	writeSVG(&buf, snapshots(chosen(one)))
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Write(buf.Bytes())
}

// serveSummary writes each allocator's memory summary
// (memmap.Snapshot.Summary, what alloc.Allocator.Summary returns), from the
// cached snapshots, one after the other.
func serveSummary(w http.ResponseWriter, one *alloc.Allocator) {
	var buf bytes.Buffer
	for i, s := range snapshots(chosen(one)) {
		if i > 0 {
			buf.WriteString("\n")
		}
		buf.WriteString(s.Summary())
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(buf.Bytes())
}
