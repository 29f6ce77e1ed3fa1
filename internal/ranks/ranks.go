// Package ranks runs one function per rank at once, the shape every
// collective needs: a rank's collective waits for its peers, so ranks in
// one process are goroutines of their own.
package ranks

import "sync"

// Each runs fn(r) for r in [0, n), each in its own goroutine, waits for
// all of them and returns their errors, indexed by rank.
func Each(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errs
}
