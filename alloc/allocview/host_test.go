package allocview_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/allocview"
)

// The index's suggested pprof command names the address the request came
// to, not a Host header the client chose; a loopback or matching Host is
// kept.
func TestIndexProfileURLIgnoresForeignHost(t *testing.T) {
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	local := strings.TrimPrefix(srv.URL, "http://")
	page := func(host string) string {
		req, err := http.NewRequest("GET", srv.URL+"/", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	got := page("attacker.example:80")
	require.NotContains(t, got, "attacker.example")
	require.Contains(t, got, "go tool pprof -http=: http://"+local+"/profile")
	require.Contains(t, page("localhost:1234"), "http://localhost:1234/profile")
	require.Contains(t, page(local), "http://"+local+"/profile")
}
