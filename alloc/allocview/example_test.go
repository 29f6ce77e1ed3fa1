package allocview_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// The views mounted on a private mux (importing the package also mounts
// them at /debug/capalloc/ on http.DefaultServeMux): here the snapshot of
// one allocator, as JSON.
func ExampleHandler() {
	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{Name: "example-view"})
	defer a.Close()
	b, _ := a.Alloc(3 << 20)
	defer a.Free(b)

	mux := http.NewServeMux()
	mux.Handle("/mem/", allocview.Handler()) // the views, relative to where they are mounted
	srv := httptest.NewServer(mux)           // an engine listens on localhost or another private address
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/mem/snapshot.json?allocator=example-view")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var s memmap.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, s.Allocator, s.Backend)
	fmt.Println("live bytes:", s.Bytes[memmap.BlockLive], "buffers:", s.Stats.LiveBuffers)
	// Output:
	// 200 OK example-view cpu
	// live bytes: 3145728 buffers: 1
}
