package nccl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/rendezvous"
)

// Bootstrap: how the ranks of a communicator find each other. Two ways,
// neither a network layer of this module's own (NCCL's bootstrap does the
// networking):
//
//   - the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT; or NCCL_COMM_ID): every rank derives the same unique id
//     from the root's address, and rank 0's ncclCommInitRank listens there
//     (InitFromEnv);
//   - a file rendezvous: rank 0 makes the id and writes it to a file every
//     rank can read, a shared file system across machines
//     (FileRendezvous, InitFromFile).

// ErrRendezvousTimeout: a rank waited longer than its timeout for rank 0's
// unique id.
var ErrRendezvousTimeout = errors.New("nccl: rendezvous timed out")

// ErrUntrustedDir: FileRendezvous's directory could be written by another
// user (not this user's, or not mode 0700), who could then hand every rank
// a forged unique id (docs/security.md).
var ErrUntrustedDir = rendezvous.ErrUntrustedDir

// Env is one rank's launch environment, torchrun's names.
type Env struct {
	Rank, WorldSize int
	// CommID is the bootstrap root's address, "host:port" (NCCL_COMM_ID's
	// format): NCCL_COMM_ID when set, else MASTER_ADDR and MASTER_PORT.
	CommID string
}

// EnvFrom reads RANK, WORLD_SIZE, and NCCL_COMM_ID or MASTER_ADDR with
// MASTER_PORT through getenv (os.Getenv). A missing or malformed variable
// is an alloc.ErrInvalidValue naming it.
func EnvFrom(getenv func(string) string) (Env, error) {
	var e Env
	num := func(name string) (int, error) {
		v := getenv(name)
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%w: nccl: %s=%q is not a number (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", alloc.ErrInvalidValue, name, v)
		}
		return n, nil
	}
	var err error
	if e.Rank, err = num("RANK"); err != nil {
		return Env{}, err
	}
	if e.WorldSize, err = num("WORLD_SIZE"); err != nil {
		return Env{}, err
	}
	if e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize {
		return Env{}, fmt.Errorf("%w: nccl: RANK=%d outside WORLD_SIZE=%d", alloc.ErrInvalidValue, e.Rank, e.WorldSize)
	}
	if id := getenv("NCCL_COMM_ID"); id != "" {
		e.CommID = id
		return e, nil
	}
	host := getenv("MASTER_ADDR")
	if host == "" {
		return Env{}, fmt.Errorf("%w: nccl: neither NCCL_COMM_ID nor MASTER_ADDR is set", alloc.ErrInvalidValue)
	}
	port, err := num("MASTER_PORT")
	if err != nil {
		return Env{}, err
	}
	if port < 1 || port > 65535 {
		return Env{}, fmt.Errorf("%w: nccl: MASTER_PORT=%d", alloc.ErrInvalidValue, port)
	}
	// net.JoinHostPort brackets an IPv6 address, as NCCL_COMM_ID wants.
	e.CommID = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port))
	return e, nil
}

// InitFromEnv makes this rank's communicator from the torchrun
// environment (EnvFrom(os.Getenv)) on dev's device. When NCCL_COMM_ID is
// not set it sets it, for this process, from MASTER_ADDR and MASTER_PORT:
// NCCL then derives the same unique id on every rank, and rank 0 listens
// on that address (the port must be free on rank 0's machine, so not the
// one torchrun's own rendezvous store uses). Like InitRank, it blocks
// until every rank has joined.
func (l *Library) InitFromEnv(dev DeviceRunner) (*Comm, error) {
	e, err := EnvFrom(os.Getenv)
	if err != nil {
		return nil, err
	}
	if os.Getenv("NCCL_COMM_ID") == "" {
		// Through purego's runtime hooks os.Setenv reaches the C
		// environment, where NCCL reads it.
		if err := os.Setenv("NCCL_COMM_ID", e.CommID); err != nil {
			return nil, fmt.Errorf("%w: nccl: setting NCCL_COMM_ID: %v", alloc.ErrInvalidValue, err)
		}
	}
	id, err := l.GetUniqueID()
	if err != nil {
		return nil, fmt.Errorf("nccl: unique id from NCCL_COMM_ID=%s: %w", e.CommID, err)
	}
	return l.InitRank(dev, e.WorldSize, id, e.Rank)
}

// FileRendezvous hands rank 0's unique id to the other ranks through the
// file at path. Rank 0 makes the id (GetUniqueID) and publishes it
// atomically (a temporary file in the same directory, linked into
// place: internal/rendezvous); it refuses to start if path already exists, since a stale id
// from an earlier run would send the others to a root that is gone: use
// a fresh path per job. Other ranks poll for the file until timeout
// (ErrRendezvousTimeout). Nobody removes the file; rank 0 may once every
// rank has its communicator. The file's directory must be this user's and
// mode 0700 (ErrUntrustedDir otherwise), and the file a regular one of
// UniqueIDBytes bytes.
func (l *Library) FileRendezvous(path string, rank int, timeout time.Duration) (UniqueID, error) {
	if path == "" || rank < 0 {
		return UniqueID{}, fmt.Errorf("%w: nccl: rendezvous at %q for rank %d", alloc.ErrInvalidValue, path, rank)
	}
	if rank == 0 {
		// Checked before the id is made: making it starts the root.
		if err := rendezvous.CheckDir(filepath.Dir(path)); err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		if err := rendezvous.Fresh(path); err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		id, err := l.GetUniqueID()
		if err != nil {
			return UniqueID{}, err
		}
		if err := rendezvous.Publish(path, id.Internal[:]); err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		return id, nil
	}
	return awaitID(path, timeout)
}

// InitFromFile is FileRendezvous then InitRank.
func (l *Library) InitFromFile(dev DeviceRunner, path string, ranks, rank int, timeout time.Duration) (*Comm, error) {
	if ranks < 1 || rank < 0 || rank >= ranks {
		return nil, fmt.Errorf("%w: nccl: rank %d of %d", alloc.ErrInvalidValue, rank, ranks)
	}
	id, err := l.FileRendezvous(path, rank, timeout)
	if err != nil {
		return nil, err
	}
	return l.InitRank(dev, ranks, id, rank)
}

// awaitID polls for path until it holds an id or timeout passes.
func awaitID(path string, timeout time.Duration) (UniqueID, error) {
	b, err := rendezvous.Await(path, UniqueIDBytes, timeout, ErrRendezvousTimeout)
	if err != nil {
		if errors.Is(err, ErrRendezvousTimeout) {
			return UniqueID{}, fmt.Errorf("%w: did rank 0 start, with the same path?", err)
		}
		return UniqueID{}, fmt.Errorf("nccl: %w", err)
	}
	if len(b) != UniqueIDBytes {
		return UniqueID{}, fmt.Errorf("%w: nccl: rendezvous file %s holds %d B, not a %d-byte unique id", alloc.ErrInvalidValue, path, len(b), UniqueIDBytes)
	}
	var id UniqueID
	copy(id.Internal[:], b)
	return id, nil
}
