// Package walkcache keeps what a walk of an allocator's blocks returned,
// for the views (alloc/allocview's snapshots) and the metrics
// (alloc/allocprom's bytes by state). A walk holds the allocator's lock
// (about a millisecond per 10,000 blocks), so they bound what their
// requests can cost the engine: one walk at a time in the process, and a
// walk serves every request for the same allocator for the cache's TTL
// (a second unless set). However many clients poll, each cache takes an
// allocator's lock for a walk at most once per TTL; what they show may be
// that much behind.
package walkcache

import (
	"sync"
	"time"
)

// DefaultTTL is how long a walk serves requests unless SetTTL says
// otherwise.
const DefaultTTL = time.Second

// walking is held across every cache's walk and lookup: one walk at a
// time in the process.
var walking sync.Mutex

// Cache holds the result of walk for each key (an allocator) for TTL.
type Cache[K comparable, V any] struct {
	walk func(K) (V, error)

	ttl  time.Duration // guarded by walking
	kept map[K]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// New returns a cache of walk's results; walk's errors are not kept.
func New[K comparable, V any](walk func(K) (V, error)) *Cache[K, V] {
	return &Cache[K, V]{walk: walk, ttl: DefaultTTL}
}

// Get returns k's walk, at most TTL old. Callers share it: they must not
// modify it.
func (c *Cache[K, V]) Get(k K) (V, error) {
	walking.Lock()
	defer walking.Unlock()
	now := time.Now()
	for key, e := range c.kept { // drop the stale, closed allocators' included
		if now.Sub(e.at) >= c.ttl {
			delete(c.kept, key)
		}
	}
	if e, ok := c.kept[k]; ok {
		return e.v, nil
	}
	v, err := c.walk(k)
	if err != nil {
		return v, err
	}
	if c.kept == nil {
		c.kept = map[K]entry[V]{}
	}
	c.kept[k] = entry[V]{v, time.Now()}
	return v, nil
}

// SetTTL sets how long a walk serves requests and forgets what is kept;
// the returned func restores the previous TTL (and forgets again). For
// tests.
func (c *Cache[K, V]) SetTTL(d time.Duration) (restore func()) {
	walking.Lock()
	defer walking.Unlock()
	old := c.ttl
	c.ttl, c.kept = d, nil
	return func() {
		walking.Lock()
		defer walking.Unlock()
		c.ttl, c.kept = old, nil
	}
}
