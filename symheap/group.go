package symheap

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/capalloc/capalloc/alloc"
)

// padSize is the signal pad at the start of every rank's file; the heap's
// data follows it.
const padSize = 4096

// Group is the shared memory of N ranks: one file (a memfd) per rank,
// holding that rank's signal pad and heap. Made once (NewGroup), or
// received from the process that made it (Attach); each rank then maps
// every file itself (Open).
type Group struct {
	files []*os.File
	size  int64 // heap bytes per rank

	mu         sync.Mutex
	serialized map[int]bool // ranks open here on a driver that may serialize host functions
}

// NewGroup makes the shared memory for ranks ranks with size heap bytes
// each, one memfd per rank with its size sealed. It makes no driver call.
// Files are closed by Close.
func NewGroup(ranks int, size int64) (*Group, error) {
	if ranks < 1 || size <= 0 {
		return nil, fmt.Errorf("%w: symheap: %d ranks of %d B", alloc.ErrInvalidValue, ranks, size)
	}
	g := &Group{size: size}
	for r := range ranks {
		f, err := newSharedFile(fmt.Sprintf("capalloc-symheap-%d", r), padSize+size)
		if err != nil {
			_ = g.Close()
			return nil, err
		}
		g.files = append(g.files, f)
	}
	return g, nil
}

// Attach wraps the files of a group made by another process (passed, in
// rank order, as Files returned them), for a rank running there. Each
// must be of the group's size and have it sealed, as NewGroup's are (on
// Linux: no process can shrink a file under its peers' mappings), or it
// is refused with alloc.ErrInvalidValue.
func Attach(files []*os.File, size int64) (*Group, error) {
	if len(files) < 1 || size <= 0 {
		return nil, fmt.Errorf("%w: symheap: attach %d files of %d B", alloc.ErrInvalidValue, len(files), size)
	}
	for i, f := range files {
		st, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("%w: symheap: file of rank %d: %v", alloc.ErrInvalidValue, i, err)
		}
		if st.Size() != padSize+size {
			return nil, fmt.Errorf("%w: symheap: file of rank %d is %d B, want %d", alloc.ErrInvalidValue, i, st.Size(), padSize+size)
		}
		if err := checkSealed(f); err != nil {
			return nil, fmt.Errorf("%w: symheap: file of rank %d: %v", alloc.ErrInvalidValue, i, err)
		}
	}
	return &Group{files: files, size: size}, nil
}

// Ranks is the number of ranks.
func (g *Group) Ranks() int { return len(g.files) }

// Size is each rank's heap size in bytes.
func (g *Group) Size() int64 { return g.size }

// Files are the ranks' files, in rank order, to pass to processes that run
// ranks (exec.Cmd.ExtraFiles), which Attach them.
func (g *Group) Files() []*os.File { return g.files }

// Close closes the files. Heaps already open keep their mappings.
func (g *Group) Close() error {
	var errs []error
	for _, f := range g.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
