package symheap

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
)

// ErrUnauthenticated: an exchange message did not carry a valid tag under
// the job's key (AuthenticatedExchange): forged, from another job or
// another exchange under the same key, or replayed from another round or
// rank. It wraps alloc.ErrInvalidValue.
var ErrUnauthenticated = fmt.Errorf("%w: symheap: exchange message not authenticated by the job's key", alloc.ErrInvalidValue)

// minExchangeKey is the shortest key AuthenticatedExchange takes.
const minExchangeKey = 16

// AuthenticatedExchange wraps x so that every message carries an
// HMAC-SHA256 tag of (exchange, round, rank, message) under key, a secret
// every rank of the job shares (handed to them by the launcher, never
// written where the exchange is), and a message whose tag does not verify
// fails AllGather with ErrUnauthenticated. It is for exchanges whose
// medium others may write: a FileExchange directory on a file system
// shared across machines, where a private directory is not enough
// (docs/security.md). key must be at least 16 bytes.
//
// The exchange is named by its ranks themselves: each rank's first
// AllGather runs an opening round of x first, in which every rank sends a
// fresh random nonce (tagged too), and the exchange's identity is the
// hash of all of them. So one key can serve two exchanges (two heaps in a
// job, or a job restarted with the same key): a message of one does not
// verify in the other, since the other's identity holds a nonce its ranks
// drew afresh. The opening round is one more round of x, before the
// caller's first.
func AuthenticatedExchange(x Exchange, key []byte) (Exchange, error) {
	if len(key) < minExchangeKey {
		return nil, fmt.Errorf("%w: symheap: exchange key of %d B (at least %d)", alloc.ErrInvalidValue, len(key), minExchangeKey)
	}
	return &authExchange{x: x, key: append([]byte(nil), key...), next: map[int]uint64{}, ids: map[int][]byte{}}, nil
}

type authExchange struct {
	x   Exchange
	key []byte

	mu   sync.Mutex
	next map[int]uint64 // each rank's next round
	ids  map[int][]byte // the exchange's identity, as each rank agreed it in its opening round
}

func (a *authExchange) Ranks() int { return a.x.Ranks() }

// What a tag covers besides the message: an opening round's nonce, or a
// message of a round of the exchange named by its identity.
const (
	tagOpening = 'O'
	tagMessage = 'M'
)

// nonceBytes is the size of a rank's nonce in the opening round.
const nonceBytes = 32

// tag is the MAC of rank's message msg in round of the exchange id
// (kind tagMessage), or of rank's nonce msg (kind tagOpening, id nil).
func (a *authExchange) tag(kind byte, id []byte, round uint64, rank int, msg []byte) []byte {
	m := hmac.New(sha256.New, a.key)
	var hdr [1 + sha256.Size + 16]byte
	hdr[0] = kind
	copy(hdr[1:], id)
	binary.LittleEndian.PutUint64(hdr[1+sha256.Size:], round)
	binary.LittleEndian.PutUint64(hdr[1+sha256.Size+8:], uint64(rank))
	m.Write(hdr[:])
	m.Write(msg)
	return m.Sum(nil)
}

// gather runs one round of x with rank's msg tagged, and returns every
// rank's message whose tag verifies; what names the round in errors.
func (a *authExchange) gather(kind byte, id []byte, round uint64, rank int, msg []byte, timeout time.Duration, what string) ([][]byte, error) {
	sealed := append(append(make([]byte, 0, len(msg)+sha256.Size), msg...), a.tag(kind, id, round, rank, msg)...)
	got, err := a.x.AllGather(rank, sealed, timeout)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(got))
	var errs []error
	for p, b := range got {
		if len(b) < sha256.Size {
			errs = append(errs, fmt.Errorf("%w: rank %d's message in %s has no tag", ErrUnauthenticated, p, what))
			continue
		}
		body, tag := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
		if !hmac.Equal(tag, a.tag(kind, id, round, p, body)) {
			errs = append(errs, fmt.Errorf("%w: rank %d's message in %s", ErrUnauthenticated, p, what))
			continue
		}
		out[p] = body
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// identity is the exchange's identity as rank agreed it: the hash of every
// rank's nonce from rank's opening round, run now if rank has not yet.
// Rank's own nonce must come back as it sent it.
func (a *authExchange) identity(rank int, timeout time.Duration) ([]byte, error) {
	a.mu.Lock()
	id := a.ids[rank]
	a.mu.Unlock()
	if id != nil {
		return id, nil
	}
	nonce := make([]byte, nonceBytes)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("%w: symheap: exchange nonce: %v", alloc.ErrInvalidValue, err)
	}
	got, err := a.gather(tagOpening, nil, 0, rank, nonce, timeout, "the opening round")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for p, b := range got {
		if len(b) != nonceBytes {
			return nil, fmt.Errorf("%w: rank %d's message in the opening round is %d B, not a %d-byte nonce", ErrUnauthenticated, p, len(b), nonceBytes)
		}
		h.Write(b)
	}
	if !bytes.Equal(got[rank], nonce) {
		return nil, fmt.Errorf("%w: rank %d's own nonce came back changed from the opening round", ErrUnauthenticated, rank)
	}
	id = h.Sum(nil)
	a.mu.Lock()
	a.ids[rank] = id
	a.mu.Unlock()
	return id, nil
}

func (a *authExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	if err := checkRank(a, rank); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	id, err := a.identity(rank, timeout)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	k := a.next[rank]
	a.next[rank]++
	a.mu.Unlock()
	return a.gather(tagMessage, id, k, rank, msg, time.Until(deadline), fmt.Sprintf("round %d", k))
}
