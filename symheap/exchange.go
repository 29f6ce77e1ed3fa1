package symheap

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/rendezvous"
)

// Exchange hands every rank's message to every rank, in rounds: the k-th
// AllGather of each rank is round k. OpenDevice exchanges the ranks' IPC
// handles and their results through it, once, before any capture.
type Exchange interface {
	// Ranks is the number of ranks taking part.
	Ranks() int
	// AllGather publishes msg as rank's message of its next round and
	// returns every rank's message of that round, in rank order. A rank
	// missing past timeout is an error wrapping ErrExchangeTimeout.
	AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error)
}

func checkRank(x Exchange, rank int) error {
	if rank < 0 || rank >= x.Ranks() {
		return fmt.Errorf("%w: symheap: exchange: rank %d of %d", alloc.ErrInvalidValue, rank, x.Ranks())
	}
	return nil
}

// missingError says which ranks had not arrived in a round.
func missingError(rank, round int, timeout time.Duration, missing []int, where string) error {
	return fmt.Errorf("%w: rank %d waited %v in round %d for rank(s) %v%s: did they start, with the same exchange?",
		ErrExchangeTimeout, rank, timeout, round, missing, where)
}

// localExchange is an Exchange for ranks that are goroutines of one
// process.
type localExchange struct {
	ranks int

	mu     sync.Mutex
	next   []int // each rank's next round
	rounds map[int]*localRound
}

type localRound struct {
	msgs    [][]byte
	arrived []bool
	n, left int
	full    chan struct{}
}

// NewLocalExchange is an Exchange for ranks ranks that are goroutines of
// this process.
func NewLocalExchange(ranks int) Exchange {
	return &localExchange{ranks: ranks, next: make([]int, max(ranks, 0)), rounds: map[int]*localRound{}}
}

func (x *localExchange) Ranks() int { return x.ranks }

func (x *localExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	if err := checkRank(x, rank); err != nil {
		return nil, err
	}
	x.mu.Lock()
	k := x.next[rank]
	x.next[rank]++
	r := x.rounds[k]
	if r == nil {
		r = &localRound{msgs: make([][]byte, x.ranks), arrived: make([]bool, x.ranks), full: make(chan struct{})}
		x.rounds[k] = r
	}
	r.msgs[rank], r.arrived[rank] = slices.Clone(msg), true
	if r.n++; r.n == x.ranks {
		close(r.full)
	}
	x.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.full:
	case <-t.C:
		x.mu.Lock()
		var missing []int
		for p, ok := range r.arrived {
			if !ok {
				missing = append(missing, p)
			}
		}
		x.mu.Unlock()
		if len(missing) > 0 {
			return nil, missingError(rank, k, timeout, missing, "")
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([][]byte, x.ranks)
	for p, m := range r.msgs {
		out[p] = slices.Clone(m)
	}
	if r.left++; r.left == x.ranks {
		delete(x.rounds, k)
	}
	return out, nil
}

// fileExchange is an Exchange through files in a directory every rank
// can reach (a shared file system across machines).
type fileExchange struct {
	dir    string
	ranks  int
	rounds roundCounter

	mu   sync.Mutex
	open *rendezvous.Dir // dir, opened and checked by the first AllGather
}

// roundCounter numbers each rank's rounds of an exchange, whose messages
// are matched by round. The zero value starts every rank at round 0; safe
// for concurrent use.
type roundCounter struct {
	mu   sync.Mutex
	next map[int]int
}

// take checks rank against x's ranks and returns its next round.
func (c *roundCounter) take(x Exchange, rank int) (int, error) {
	if err := checkRank(x, rank); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = map[int]int{}
	}
	k := c.next[rank]
	c.next[rank]++
	return k, nil
}

// MaxExchangeMessage bounds one rank's message in a FileExchange round
// (OpenDevice's are an IPC handle and a few integers): a reader takes no
// more from a file.
const MaxExchangeMessage = 64 << 10

// ErrUntrustedDir is a FileExchange directory another user could write
// (not this user's, or not mode 0700): whoever can write it can forge any
// rank's message, an IPC handle included (docs/security.md).
var ErrUntrustedDir = rendezvous.ErrUntrustedDir

// FileExchange is an Exchange for ranks ranks in processes that share
// dir: each round, each rank publishes its message as a file
// (round-K-rank-R, written atomically, internal/rendezvous) and polls for
// the others'. A file that already exists is refused (a stale one from an
// earlier run): use a fresh directory per job. Nobody removes the files.
// dir must be owned by the ranks' user and closed to everyone else (mode
// 0700), and be the directory itself, not a symbolic link, or AllGather
// fails with ErrUntrustedDir; a message file must be a regular file of at
// most MaxExchangeMessage bytes. The first AllGather opens and checks dir
// and the exchange keeps it open for its life: every later round reads
// and writes that directory, even if another is renamed into its path.
func FileExchange(dir string, ranks int) Exchange {
	return &fileExchange{dir: dir, ranks: ranks}
}

func (x *fileExchange) Ranks() int { return x.ranks }

func fileName(round, rank int) string { return fmt.Sprintf("round-%d-rank-%d", round, rank) }

// opened is the exchange's directory, opened and checked (OpenDir) the
// first time; a refusal is not kept, so a later call checks again.
func (x *fileExchange) opened() (*rendezvous.Dir, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.open == nil {
		d, err := rendezvous.OpenDir(x.dir)
		if err != nil {
			return nil, err
		}
		x.open = d // closed with the exchange, when it is garbage (os.File's cleanup)
	}
	return x.open, nil
}

func (x *fileExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	k, err := x.rounds.take(x, rank)
	if err != nil {
		return nil, err
	}
	if len(msg) > MaxExchangeMessage {
		return nil, fmt.Errorf("%w: symheap: exchange: a message of %d B (at most %d)", alloc.ErrInvalidValue, len(msg), MaxExchangeMessage)
	}
	d, err := x.opened()
	if err != nil {
		return nil, fmt.Errorf("symheap: exchange: %w", err)
	}
	if err := d.Publish(fileName(k, rank), msg); err != nil {
		return nil, fmt.Errorf("symheap: exchange: %w", err)
	}
	deadline := time.Now().Add(timeout)
	out := make([][]byte, x.ranks)
	for p := range out {
		b, err := d.Await(fileName(k, p), MaxExchangeMessage, time.Until(deadline), ErrExchangeTimeout)
		if errors.Is(err, ErrExchangeTimeout) {
			missing := []int{p}
			for q := p + 1; q < x.ranks; q++ {
				if !d.Exists(fileName(k, q)) {
					missing = append(missing, q)
				}
			}
			return nil, missingError(rank, k, timeout, missing, " (no file in "+x.dir+")")
		}
		if err != nil {
			return nil, fmt.Errorf("symheap: exchange: %w", err)
		}
		out[p] = b
	}
	return out, nil
}
