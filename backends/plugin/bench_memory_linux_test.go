package plugin

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkCopyMemory measures the candidates of issue 23, item 3: a warm
// 64 MiB copy between the kinds of memory a transfer meets, in one process
// (so the RPC is out of the picture): the Go heap (where the cpu backend
// keeps device and pinned memory in process), a memfd region as the plugin
// makes it (newRegion: shmem, MAP_SHARED), and anonymous memory with and
// without MADV_HUGEPAGE (transparent huge pages where the system allows
// them); each with one copying goroutine and with two (half the range
// each). It reports whether the kernel actually gave huge pages to the
// region (huge-MiB: the mapping's AnonHugePages, ShmemPmdMapped and
// Hugetlb from /proc/self/smaps).
func BenchmarkCopyMemory(b *testing.B) {
	kinds := []struct {
		name string
		make func(b *testing.B) []byte
	}{
		{"heap", func(b *testing.B) []byte { return make([]byte, benchBytes) }},
		{"memfd", func(b *testing.B) []byte { return benchRegion(b, false) }},
		{"memfd+madv_hugepage", func(b *testing.B) []byte { return benchRegion(b, true) }},
		{"anon+madv_hugepage", func(b *testing.B) []byte { return benchAnon(b) }},
	}
	for _, threads := range []int{1, 2} {
		for _, k := range kinds {
			b.Run("mem="+k.name+"/threads="+strconv.Itoa(threads), func(b *testing.B) {
				src, dst := k.make(b), k.make(b)
				for i := range src {
					src[i] = byte(i)
				}
				copy(dst, src) // warm: every page of both faulted in
				b.SetBytes(benchBytes)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					splitCopy(dst, src, threads)
				}
				b.StopTimer()
				b.ReportMetric(float64(hugeBytes(b, dst))/(1<<20), "huge-MiB")
			})
		}
	}
}

// splitCopy copies src to dst with n goroutines, the caller's among them.
func splitCopy(dst, src []byte, n int) {
	var wg sync.WaitGroup
	step := len(src) / n
	for i := 1; i < n; i++ {
		lo, hi := i*step, (i+1)*step
		if i == n-1 {
			hi = len(src)
		}
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	copy(dst[:step], src[:step])
	wg.Wait()
}

func benchRegion(b *testing.B, huge bool) []byte {
	r, err := newRegion(1, benchBytes)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.release() })
	if huge {
		if err := unix.Madvise(r.buf, unix.MADV_HUGEPAGE); err != nil {
			b.Logf("madvise(MADV_HUGEPAGE) on a memfd region: %v", err)
		}
	}
	return r.buf
}

func benchAnon(b *testing.B) []byte {
	m, err := unix.Mmap(-1, 0, benchBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unix.Munmap(m) })
	if err := unix.Madvise(m, unix.MADV_HUGEPAGE); err != nil {
		b.Logf("madvise(MADV_HUGEPAGE): %v", err)
	}
	return m
}

// hugeBytes is how much of the mapping holding b the kernel backs with huge
// pages, from /proc/self/smaps.
func hugeBytes(b *testing.B, buf []byte) int64 {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		b.Logf("smaps: %v", err)
		return 0
	}
	p := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	in := false
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && l <= p && p < h
			continue
		}
		switch f[0] {
		case "AnonHugePages:", "ShmemPmdMapped:", "Shared_Hugetlb:", "Private_Hugetlb:":
			if in && len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				kb += n
			}
		}
	}
	return kb << 10
}
