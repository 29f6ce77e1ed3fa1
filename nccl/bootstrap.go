package nccl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
		host, port, err := net.SplitHostPort(id)
		if err == nil {
			err = checkHost(host)
		}
		if err == nil {
			err = checkPort(port)
		}
		if err != nil {
			return Env{}, fmt.Errorf("%w: nccl: NCCL_COMM_ID=%q: want host:port or [ipv6]:port: %v", alloc.ErrInvalidValue, id, err)
		}
		e.CommID = id
		return e, nil
	}
	host := getenv("MASTER_ADDR")
	if host == "" {
		return Env{}, fmt.Errorf("%w: nccl: neither NCCL_COMM_ID nor MASTER_ADDR is set", alloc.ErrInvalidValue)
	}
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1] // an IPv6 address in brackets
	}
	if err := checkHost(host); err != nil {
		return Env{}, fmt.Errorf("%w: nccl: MASTER_ADDR=%q: %v", alloc.ErrInvalidValue, getenv("MASTER_ADDR"), err)
	}
	port := getenv("MASTER_PORT")
	if err := checkPort(port); err != nil {
		return Env{}, fmt.Errorf("%w: nccl: MASTER_PORT=%q: %v (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", alloc.ErrInvalidValue, port, err)
	}
	// net.JoinHostPort brackets an IPv6 address, as NCCL_COMM_ID wants.
	e.CommID = net.JoinHostPort(host, port)
	return e, nil
}

// checkHost accepts an IP address (IPv6 with an optional zone) or a DNS
// host name (RFC 1123 labels): what NCCL_COMM_ID may hold.
func checkHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if h == "" || len(h) > 253 {
		return fmt.Errorf("not an IP address or host name")
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("not an IP address or host name")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("not an IP address or host name")
			}
		}
	}
	return nil
}

// checkPort accepts a decimal port in [1, 65535].
func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return fmt.Errorf("port %q is not a number in [1, 65535]", p)
	}
	return nil
}

// InitFromEnv makes this rank's communicator from the torchrun
// environment (EnvFrom(os.Getenv)) on dev's device. When NCCL_COMM_ID is
// not set it sets it, for this process, from MASTER_ADDR and MASTER_PORT,
// for the length of the call (NCCL reads it in ncclGetUniqueId and, on
// rank 0, in ncclCommInitRank), then unsets it: NCCL then derives the same
// unique id on every rank, and rank 0 listens on that address (the port
// must be free on rank 0's machine, so not the one torchrun's own
// rendezvous store uses). Like InitRank, it blocks until every rank has
// joined.
//
// An id from NCCL_COMM_ID carries NCCL's fixed magic rather than a random
// one, so rank 0's listener accepts whoever reaches the address first:
// MASTER_ADDR must be on a private network (docs/security.md). Other
// goroutines calling GetUniqueID during InitFromEnv see the variable too.
func (l *Library) InitFromEnv(dev DeviceRunner) (*Comm, error) {
	return l.initFromEnv(func(ranks int, id UniqueID, rank int) (*Comm, error) { return l.InitRank(dev, ranks, id, rank) })
}

// InitFromEnvConfig is InitFromEnv with a communicator made by
// InitRankConfig from cfg (nonblocking mode, CTA limits: Config).
func (l *Library) InitFromEnvConfig(dev DeviceRunner, cfg Config) (*Comm, error) {
	if _, err := l.checkConfig(cfg); err != nil {
		return nil, err
	}
	return l.initFromEnv(func(ranks int, id UniqueID, rank int) (*Comm, error) {
		return l.InitRankConfig(dev, ranks, id, rank, cfg)
	})
}

// initFromEnv reads torchrun's variables, derives the unique id from
// NCCL_COMM_ID and makes the communicator with initRank while the
// variable is still set (rank 0 starts its root there).
func (l *Library) initFromEnv(initRank func(ranks int, id UniqueID, rank int) (*Comm, error)) (*Comm, error) {
	e, err := EnvFrom(os.Getenv)
	if err != nil {
		return nil, err
	}
	envMu.Lock()
	defer envMu.Unlock()
	if os.Getenv("NCCL_COMM_ID") == "" {
		// Through purego's runtime hooks os.Setenv and os.Unsetenv reach
		// the C environment, where NCCL reads it.
		if err := os.Setenv("NCCL_COMM_ID", e.CommID); err != nil {
			return nil, fmt.Errorf("%w: nccl: setting NCCL_COMM_ID: %v", alloc.ErrInvalidValue, err)
		}
		defer os.Unsetenv("NCCL_COMM_ID")
	}
	id, err := l.GetUniqueID()
	if err != nil {
		return nil, fmt.Errorf("nccl: unique id from NCCL_COMM_ID=%s: %w", e.CommID, err)
	}
	return initRank(e.WorldSize, id, e.Rank)
}

// envMu serializes InitFromEnv's use of the process's NCCL_COMM_ID.
var envMu sync.Mutex

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
		// Checked before the id is made: making it starts the root. The
		// id is published in the directory checked.
		d, err := rendezvous.OpenDir(filepath.Dir(path))
		if err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		defer d.Close()
		name := filepath.Base(path)
		if err := d.Fresh(name); err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		id, err := l.GetUniqueID()
		if err != nil {
			return UniqueID{}, err
		}
		if err := d.Publish(name, id.Internal[:]); err != nil {
			return UniqueID{}, fmt.Errorf("nccl: %w", err)
		}
		return id, nil
	}
	return awaitID(path, timeout)
}

// InitFromFile is FileRendezvous then InitRank.
func (l *Library) InitFromFile(dev DeviceRunner, path string, ranks, rank int, timeout time.Duration) (*Comm, error) {
	id, err := l.fileID(path, ranks, rank, timeout)
	if err != nil {
		return nil, err
	}
	return l.InitRank(dev, ranks, id, rank)
}

// InitFromFileConfig is FileRendezvous then InitRankConfig with cfg. The
// config is checked before the rendezvous, so a bad one leaves no id
// published and no rank waiting.
func (l *Library) InitFromFileConfig(dev DeviceRunner, path string, ranks, rank int, timeout time.Duration, cfg Config) (*Comm, error) {
	if _, err := l.checkConfig(cfg); err != nil {
		return nil, err
	}
	id, err := l.fileID(path, ranks, rank, timeout)
	if err != nil {
		return nil, err
	}
	return l.InitRankConfig(dev, ranks, id, rank, cfg)
}

// fileID checks rank of ranks and runs FileRendezvous.
func (l *Library) fileID(path string, ranks, rank int, timeout time.Duration) (UniqueID, error) {
	if ranks < 1 || rank < 0 || rank >= ranks {
		return UniqueID{}, fmt.Errorf("%w: nccl: rank %d of %d", alloc.ErrInvalidValue, rank, ranks)
	}
	return l.FileRendezvous(path, rank, timeout)
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
