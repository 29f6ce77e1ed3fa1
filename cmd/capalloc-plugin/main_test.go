package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/backends/plugin" // the host side, in this test binary
)

// build compiles this command, as a user would ship it.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "capalloc-plugin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

func TestServesBackendsByPathWithChecksum(t *testing.T) {
	bin := build(t)
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	ctx := context.Background()

	d, err := backends.OpenDriver(ctx, "plugin:"+bin+":plugin.backend=cpu,plugin.sha256="+hex.EncodeToString(sum[:])+",memory_limit=64MiB")
	require.NoError(t, err)
	require.Equal(t, int64(64<<20), d.Info().TotalMemory, "backend options reach the child")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	buf, err := a.Alloc(4096)
	require.NoError(t, err)
	in := []byte("served by cmd/capalloc-plugin")
	require.NoError(t, a.Upload(buf, 0, in))
	out := make([]byte, len(in))
	require.NoError(t, a.Download(out, buf, 0))
	require.Equal(t, in, out)
	require.NoError(t, a.Free(buf))
	require.NoError(t, a.Close())

	wrong := sha256.Sum256([]byte("not the binary"))
	_, err = backends.OpenDriver(ctx, "plugin:"+bin+":plugin.backend=cpu,plugin.sha256="+hex.EncodeToString(wrong[:]))
	require.ErrorIs(t, err, driver.ErrBackendUnavailable, "a checksum mismatch never runs the binary")
}

func TestRunByHandSaysWhatItIs(t *testing.T) {
	out, err := exec.Command(build(t)).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "cpu")
	require.Contains(t, string(out), "plugin:NAME")
}
