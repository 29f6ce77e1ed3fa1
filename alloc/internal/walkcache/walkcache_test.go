package walkcache

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/ranks"
)

// A walk serves every Get for its key until the TTL passes; keys are
// walked apart; an error is returned and not kept.
func TestCacheKeepsAWalkForItsTTL(t *testing.T) {
	walks := map[string]int{}
	fail := false
	c := New(func(k string) (int, error) {
		if fail {
			return 0, errors.New("closed")
		}
		walks[k]++
		return walks[k], nil
	})
	defer c.SetTTL(time.Hour)()
	for range 10 {
		v, err := c.Get("a")
		require.NoError(t, err)
		require.Equal(t, 1, v)
	}
	v, err := c.Get("b")
	require.NoError(t, err)
	require.Equal(t, 1, v)

	c.SetTTL(0)
	v, err = c.Get("a")
	require.NoError(t, err)
	require.Equal(t, 2, v, "an expired walk is walked again")
	fail = true
	_, err = c.Get("a")
	require.Error(t, err)
	fail = false
	v, err = c.Get("a")
	require.NoError(t, err)
	require.Equal(t, 3, v, "the error was not kept")
	require.Equal(t, DefaultTTL, New(func(int) (int, error) { return 0, nil }).ttl)
}

// One walk at a time in the process, across caches.
func TestOneWalkAtATime(t *testing.T) {
	var in, most atomic.Int32
	walk := func(int) (int, error) {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		in.Add(-1)
		return 0, nil
	}
	caches := []*Cache[int, int]{New(walk), New(walk)}
	for _, c := range caches {
		defer c.SetTTL(0)()
	}
	ranks.Each(8, func(i int) error {
		for k := range 5 {
			_, _ = caches[i%2].Get(k)
		}
		return nil
	})
	require.EqualValues(t, 1, most.Load())
}
