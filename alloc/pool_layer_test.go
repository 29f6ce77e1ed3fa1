package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// fakeUpstream is a pool's upstream with no driver behind it: addresses
// from a counter, a byte limit on what is allocated and mapped at once,
// and no reclaim hooks but the pool's own. The pool runs on it alone,
// which is what makes it a layer.
type fakeUpstream struct {
	next        driver.DevicePtr
	limit, used int64
	gran        int64 // 0: no virtual memory
	maps        map[driver.DevicePtr]int64
}

func newFakeUpstream(limit, gran int64) *fakeUpstream {
	return &fakeUpstream{next: 1 << 40, limit: limit, gran: gran, maps: map[driver.DevicePtr]int64{}}
}

func (u *fakeUpstream) take(n int64) error {
	if u.used+n > u.limit {
		return fmt.Errorf("%w: %d B with %d of %d used", ErrOutOfMemory, n, u.used, u.limit)
	}
	u.used += n
	return nil
}

func (u *fakeUpstream) allocate(n int64) (driver.DevicePtr, error) {
	if err := u.take(n); err != nil {
		return 0, err
	}
	p := u.next
	u.next += driver.DevicePtr(n + 4096)
	return p, nil
}

func (u *fakeUpstream) free(_ driver.DevicePtr, n int64) error { u.used -= n; return nil }
func (u *fakeUpstream) mapGranularity() int64                  { return u.gran }
func (u *fakeUpstream) reserve(n int64) (driver.DevicePtr, error) {
	p := u.next
	u.next += driver.DevicePtr(n + 4096)
	return p, nil
}

func (u *fakeUpstream) mapMemory(p driver.DevicePtr, n int64) error {
	if _, ok := u.maps[p]; ok {
		return fmt.Errorf("%w: %#x mapped twice", ErrInvalidValue, p)
	}
	if err := u.take(n); err != nil {
		return err
	}
	u.maps[p] = n
	return nil
}

func (u *fakeUpstream) unmapMemory(p driver.DevicePtr, n int64) error {
	if u.maps[p] != n {
		return fmt.Errorf("%w: %#x+%d not a mapping", ErrInvalidValue, p, n)
	}
	delete(u.maps, p)
	u.used -= n
	return nil
}

func (u *fakeUpstream) flush()                   {}
func (u *fakeUpstream) idle() (bool, error)      { return true, nil }
func (u *fakeUpstream) drain(string) error       { return nil }
func (u *fakeUpstream) synchronize(string) error { return nil }
func (u *fakeUpstream) trim(bool) bool           { return false }
func (u *fakeUpstream) mayReleaseAll() error     { return nil }
func (u *fakeUpstream) releaseHost(string) bool  { return false }
func (u *fakeUpstream) retried()                 {}
func (u *fakeUpstream) String() string           { return fmt.Sprintf("%d of %d B used", u.used, u.limit) }
func (u *fakeUpstream) reset(p *pool, e int64)   { p.init(nil, 0, e, u) }

// playPool plays a randomized trace of allocations, frees and trims on a
// pool over u, calling check after every step (true: stop there), and
// returns the pool, the blocks still live and the allocations that ran
// out of memory.
func playPool(t *testing.T, u *fakeUpstream, steps int, check func(step int, p *pool) bool) (p *pool, live []*block, oom int) {
	t.Helper()
	p = &pool{}
	u.reset(p, u.limit)
	rng := rand.New(rand.NewPCG(3, 0))
	for i := range steps {
		switch r := rng.IntN(100); {
		case r < 2:
			if _, err := p.releaseAll("Trim", u.gran > 0); err != nil {
				t.Fatalf("step %d: trim: %v", i, err)
			}
		case r < 50 && len(live) > 0:
			k := rng.IntN(len(live))
			p.put(live[k])
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			n := p.round(int64(256 + rng.ExpFloat64()*float64(1<<20)))
			b := p.get(n)
			if b == nil {
				var err error
				ok := false
				if u.gran > 0 {
					b, ok, err = p.growExpandable(n, 1<<62)
				}
				if !ok {
					b, err = p.grow(n)
				}
				if err != nil {
					if !errors.Is(err, ErrOutOfMemory) {
						t.Fatalf("step %d: %v", i, err)
					}
					oom++
					break
				}
			}
			live = append(live, b)
		}
		if check(i, p) {
			break
		}
	}
	return p, live, oom
}

// The pool alone, over an upstream of its own, keeps its invariants after
// every step of a randomized trace that runs out of memory, and gives
// every byte back once its blocks are freed and it is trimmed.
func TestPoolLayerKeepsInvariants(t *testing.T) {
	for _, gran := range []int64{0, 4 << 10} {
		u := newFakeUpstream(24<<20, gran)
		p, live, oom := playPool(t, u, 4000, func(i int, p *pool) bool {
			if err := p.check(); err != nil {
				t.Fatalf("gran %d, step %d: %v", gran, i, err)
			}
			return false
		})
		if oom == 0 {
			t.Fatalf("gran %d: the trace never ran out of memory: the ladder was not climbed", gran)
		}
		for _, b := range live {
			p.put(b)
		}
		if _, err := p.releaseAll("Trim", gran > 0); err != nil {
			t.Fatal(err)
		}
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
		if u.used != 0 || p.cached != 0 {
			t.Fatalf("gran %d: after freeing and trimming everything: %v, %d B cached", gran, u, p.cached)
		}
	}
}

// check can fail: each corruption of a sound pool is reported.
func TestPoolCheckFindsCorruption(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gran    int64
		corrupt func(p *pool) bool // false: no place to corrupt
		says    string
	}{
		{"gap between blocks", 0, func(p *pool) bool {
			for s := range p.segments() {
				if b := s.first; b.segNext != nil && !b.free {
					b.class -= p.granule
					return true
				}
			}
			return false
		}, "out of order"},
		{"free block outside the index", 0, func(p *pool) bool {
			b := anyFree(p)
			if b != nil {
				b.seg.ar.free.remove(b)
			}
			return b != nil
		}, "not in the index"},
		{"indexed block not free", 0, func(p *pool) bool {
			b := anyFree(p)
			if b != nil {
				b.free = false
			}
			return b != nil
		}, "not a free block"},
		{"cached bytes off", 0, func(p *pool) bool { p.cached += p.granule; return true }, "add up"},
		{"segment larger than its blocks", 0, func(p *pool) bool {
			for s := range p.segments() {
				s.size += p.granule
				return true
			}
			return false
		}, "cover"},
		{"range mapped bytes off", 4 << 10, func(p *pool) bool {
			if e := p.small.exp; e != nil {
				e.seg.size += e.chunk
				return true
			}
			return false
		}, "outside holes"},
		{"hole not whole chunks", 4 << 10, func(p *pool) bool {
			for s := range p.segments() {
				for b := range s.blocks() {
					if b.kind == kindHole && b.segNext != nil && b.segNext.free && b.segNext.class > p.granule {
						b.class += p.granule
						b.segNext.ptr += driver.DevicePtr(p.granule)
						b.segNext.class -= p.granule
						return true
					}
				}
			}
			return false
		}, "whole chunks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newFakeUpstream(24<<20, tc.gran)
			done := false
			playPool(t, u, 2000, func(i int, p *pool) bool {
				if err := p.check(); err != nil {
					t.Fatalf("step %d: sound pool: %v", i, err)
				}
				if i < 500 || !tc.corrupt(p) {
					return false
				}
				done = true
				err := p.check()
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("step %d: corrupted pool: check() = %v, want %q", i, err, tc.says)
				}
				t.Log("reported:", err)
				return true // the pool is corrupt: the trace stops
			})
			if !done {
				t.Fatal("the trace never gave the corruption a place")
			}
		})
	}
}

// anyFree is some free block in an arena's index, or nil.
func anyFree(p *pool) *block {
	for _, ar := range p.arenas() {
		for _, h := range ar.free.heads {
			if h != nil {
				return h
			}
		}
	}
	return nil
}
