package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/rtc"
)

// The residency rule against the counts the issue worked out by hand
// (issue 34: 56 registers on sm_90 hold 2 blocks of 512, 32 hold 4, 36
// hold 3) and sm_89's 1,536-thread limit.
func TestBlocksPerSM(t *testing.T) {
	sm90, sm89 := archs[3], archs[2]
	for _, c := range []struct {
		a          arch
		regs, want int
	}{{sm90, 56, 2}, {sm90, 60, 2}, {sm90, 32, 4}, {sm90, 36, 3}, {sm90, 24, 4}, {sm90, 64, 2}, {sm90, 65, 1}, {sm89, 24, 3}, {sm89, 46, 2}} {
		if got := blocksPerSM(c.a, c.regs); got != c.want {
			t.Errorf("%s, %d registers: %d blocks, want %d", c.a.name, c.regs, got, c.want)
		}
	}
}

// The table in docs/device-collectives.md is what this command makes
// from the source, where NVRTC is installed (as TestNVRTCReproducesPTX
// checks the PTX): regenerate it with
// go run ./internal/kernels/regtable -w docs/device-collectives.md.
func TestTableMatchesDocs(t *testing.T) {
	n, err := rtc.OpenNVRTC()
	if errors.Is(err, driver.ErrBackendUnavailable) {
		t.Skipf("no NVRTC installed (Debian: libnvrtc11.2, contrib/non-free): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := table(n)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "device-collectives.md"))
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatal("docs/device-collectives.md has no regtable markers")
	}
	major, minor := n.Version()
	if m := regexp.MustCompile(`^NVRTC (\d+\.\d+),`).FindSubmatch(doc[i+len(begin):]); m == nil {
		t.Fatal("the docs' table does not say which NVRTC made it")
	} else if have := fmt.Sprintf("%d.%d", major, minor); have != string(m[1]) {
		t.Skipf("the docs' table was made by NVRTC %s, this is %s (%s): set CAPALLOC_NVRTC_LIB to an NVRTC %s to compare", m[1], have, n.Path, m[1])
	}
	if have := doc[i+len(begin) : j]; !bytes.Equal(have, got) {
		t.Errorf("docs/device-collectives.md's table is stale; regenerate it (go run ./internal/kernels/regtable -w docs/device-collectives.md). This NVRTC makes:\n%s\nThe docs have:\n%s", got, have)
	}
}
