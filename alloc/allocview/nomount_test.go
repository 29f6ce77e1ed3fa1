//go:build capalloc_nomount

package allocview_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/allocview"
)

// Built with -tags capalloc_nomount, importing the package mounts nothing
// on http.DefaultServeMux (no views, no /debug/vars), and Handler still
// serves the views where the engine mounts it.
func TestNoDefaultMount(t *testing.T) {
	engine(t, "view-nomount")
	def := httptest.NewServer(http.DefaultServeMux)
	defer def.Close()
	for _, p := range []string{allocview.Prefix, allocview.Prefix + "snapshot.json", "/debug/vars"} {
		resp, _ := get(t, def.URL+p)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	private := httptest.NewServer(allocview.Handler())
	defer private.Close()
	resp, _ := get(t, private.URL+"/snapshot.json?allocator=view-nomount")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
