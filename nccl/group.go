package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// NCCL's group state belongs to the calling OS thread (ncclGroupStart
// and ncclGroupEnd nest per thread): a group locks its goroutine to its
// thread, and the library keeps the open group of each thread, so the
// operations made inside join it and ncclGroupEnd is watched over every
// communicator they used.

// group is one thread's open NCCL group.
type group struct {
	depth   int
	comms   []*Comm
	timeout time.Duration // the longest timeout of the operations in it
}

// add records that c has an operation in g, bounded by timeout.
func (g *group) add(c *Comm, timeout time.Duration) {
	if !slices.Contains(g.comms, c) {
		g.comms = append(g.comms, c)
	}
	g.timeout = max(g.timeout, timeout)
}

// Group runs fn between ncclGroupStart and ncclGroupEnd, so the NCCL
// operations fn makes (Send, Recv and the collectives, on any of this
// library's communicators) are one operation: a stage's sends and receives
// to several peers cannot deadlock on their order. fn runs on the caller's
// goroutine, locked to its thread (NCCL's group state is per thread);
// operations fn starts on other goroutines are not in the group. Groups
// nest; the outermost end launches. An error from fn, or a panic, still
// ends the group; the result joins fn's error and the end's.
//
// Under capture each operation is recorded where fn makes it (on the
// allocator's capturing stream) and ncclGroupEnd launches them into the
// graph; the group itself records nothing else. ncclGroupEnd is watched:
// bounded by the longest watchdog timeout of the allocators the
// operations went through; past it every communicator used in the group is
// aborted and the result is ErrCollectiveTimeout.
func (l *Library) Group(fn func() error) error {
	if fn == nil {
		return fmt.Errorf("%w: nccl: group: nil function", alloc.ErrInvalidValue)
	}
	return l.grouped(func(*group) error { return fn() })
}

func (l *Library) grouped(fn func(g *group) error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := gettid()
	if tid < 0 {
		return fmt.Errorf("%w: nccl: groups need the thread id (linux)", driver.ErrBackendUnavailable)
	}
	if err := l.check("ncclGroupStart", gpurt.Call(l.groupStart)); err != nil {
		return err
	}
	g := l.openGroup(tid)
	defer func() {
		var end error
		if l.closeGroup(tid, g) && len(g.comms) > 0 {
			end = l.watch("ncclGroupEnd", g.comms, g.timeout, func() int32 { return gpurt.Call(l.groupEnd) })
		} else {
			end = l.check("ncclGroupEnd", gpurt.Call(l.groupEnd))
		}
		err = errors.Join(err, end)
	}()
	return fn(g)
}

// openGroup opens, or nests into, the group of thread tid.
func (l *Library) openGroup(tid int) *group {
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	g := l.groups[tid]
	if g == nil {
		if l.groups == nil {
			l.groups = map[int]*group{}
		}
		g = &group{}
		l.groups[tid] = g
		l.groupsOpen.Add(1)
	}
	g.depth++
	return g
}

// closeGroup leaves g and reports whether it was the outermost level.
func (l *Library) closeGroup(tid int, g *group) bool {
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	g.depth--
	if g.depth > 0 {
		return false
	}
	delete(l.groups, tid)
	l.groupsOpen.Add(-1)
	return true
}

// currentGroup is the group open on the calling thread, or nil. Only a
// goroutine inside Group is locked to its thread, so a match is never
// another goroutine's group.
func (l *Library) currentGroup() *group {
	if l.groupsOpen.Load() == 0 {
		return nil
	}
	tid := gettid()
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	return l.groups[tid]
}
