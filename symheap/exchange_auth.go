package symheap

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc"
)

// ErrUnauthenticated: an exchange message did not carry a valid tag under
// the job's key (AuthenticatedExchange): forged, from another job, or
// replayed from another round or rank. It wraps alloc.ErrInvalidValue.
var ErrUnauthenticated = fmt.Errorf("%w: symheap: exchange message not authenticated by the job's key", alloc.ErrInvalidValue)

// minExchangeKey is the shortest key AuthenticatedExchange takes.
const minExchangeKey = 16

// AuthenticatedExchange wraps x so that every message carries an
// HMAC-SHA256 tag of (round, rank, message) under key, a secret every rank
// of the job shares (handed to them by the launcher, never written where
// the exchange is), and a message whose tag does not verify fails
// AllGather with ErrUnauthenticated. It is for exchanges whose medium
// others may write: a FileExchange directory on a file system shared
// across machines, where a private directory is not enough
// (docs/security.md). key must be at least 16 bytes.
func AuthenticatedExchange(x Exchange, key []byte) (Exchange, error) {
	if len(key) < minExchangeKey {
		return nil, fmt.Errorf("%w: symheap: exchange key of %d B (at least %d)", alloc.ErrInvalidValue, len(key), minExchangeKey)
	}
	return &authExchange{x: x, key: append([]byte(nil), key...)}, nil
}

type authExchange struct {
	x      Exchange
	key    []byte
	rounds roundCounter
}

func (a *authExchange) Ranks() int { return a.x.Ranks() }

// tag is the MAC of rank's message msg in round.
func (a *authExchange) tag(round, rank int, msg []byte) []byte {
	m := hmac.New(sha256.New, a.key)
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(round))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(rank))
	m.Write(hdr[:])
	m.Write(msg)
	return m.Sum(nil)
}

func (a *authExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	k, err := a.rounds.take(a, rank)
	if err != nil {
		return nil, err
	}
	sealed := append(append(make([]byte, 0, len(msg)+sha256.Size), msg...), a.tag(k, rank, msg)...)
	got, err := a.x.AllGather(rank, sealed, timeout)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(got))
	var errs []error
	for p, b := range got {
		if len(b) < sha256.Size {
			errs = append(errs, fmt.Errorf("%w: rank %d's message in round %d has no tag", ErrUnauthenticated, p, k))
			continue
		}
		body, tag := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
		if !hmac.Equal(tag, a.tag(k, p, body)) {
			errs = append(errs, fmt.Errorf("%w: rank %d's message in round %d", ErrUnauthenticated, p, k))
			continue
		}
		out[p] = body
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
