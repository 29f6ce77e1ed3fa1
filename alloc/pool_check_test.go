package alloc_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// The pool's invariants (pool.check: blocks tile their segments, the free
// index holds exactly the free blocks, the cached bytes add up, the
// expandable ranges' mappings agree) hold after every step of a
// randomized trace of Alloc, Free, AllocSync and Trim on a device small
// enough that allocations run out of memory and climb the reclaim
// ladder: plain segments, and expandable ranges on a fake virtual memory
// whose mappings are checked the way CUDA checks them.
func TestPoolInvariantsAfterEveryStep(t *testing.T) {
	const limit = 40 * mib
	for _, expandable := range []bool{false, true} {
		name := "plain"
		if expandable {
			name = "expandable"
		}
		t.Run(name, func(t *testing.T) {
			var a *alloc.Allocator
			var vm *vmDriver
			if expandable {
				vm = newVMDriver(t, limit)
				a = newExpandable(t, vm)
			} else {
				_, a = newCPUAllocator(t, limit)
			}
			tr := newPoolTrace(3000, 32, 256, 8*mib, 11)
			rng := rand.New(rand.NewPCG(5, 0))
			live := make([]alloc.Buffer, tr.slots)
			var syncs []alloc.Buffer
			oom := 0
			for i, op := range tr.ops {
				switch {
				case op.size == 0:
					if live[op.slot].Size() > 0 {
						require.NoError(t, a.Free(live[op.slot]), "op %d", i)
						live[op.slot] = alloc.Buffer{}
					}
				case rng.IntN(20) == 0 && !expandable: // the fake's memory is mapped only
					b, err := a.AllocSync(op.size)
					if errors.Is(err, alloc.ErrOutOfMemory) {
						oom++
						break
					}
					require.NoError(t, err, "op %d", i)
					syncs = append(syncs, b)
				default:
					b, err := a.Alloc(op.size)
					if errors.Is(err, alloc.ErrOutOfMemory) {
						oom++
						break
					}
					require.NoError(t, err, "op %d", i)
					live[op.slot] = b
				}
				if len(syncs) > 2 {
					require.NoError(t, a.Free(syncs[0]))
					syncs = syncs[1:]
				}
				if rng.IntN(64) == 0 {
					require.NoError(t, a.Trim(), "op %d", i)
				}
				require.NoError(t, a.CheckPool(), "after op %d", i)
				if vm != nil {
					agrees(t, a, vm)
				}
			}
			require.Positive(t, oom, "the device ran out of memory: the ladder was climbed")
			for _, b := range syncs {
				require.NoError(t, a.Free(b))
			}
			require.NoError(t, a.Trim())
			require.NoError(t, a.CheckPool())
			st := a.Stats()
			require.Zero(t, st.BytesInUse)
			require.Zero(t, st.BytesReserved, "every segment and chunk merged back whole and was given back: %s", st)
			if vm != nil {
				closeClean(t, a, vm)
			} else {
				require.NoError(t, a.Close())
			}
		})
	}
}

// An AllocSync that runs out of memory climbs the reclaim ladder: it gives
// back as few cached segments as make room for it, not the whole cache,
// so the engine's next step still finds the rest.
func TestAllocSyncGivesBackOnlyWhatIsNeeded(t *testing.T) {
	const limit = 8 * mib
	_, a := newCPUAllocator(t, limit)
	var bs []alloc.Buffer
	for range 4 { // four 2 MiB segments: the whole device
		b, err := a.Alloc(2 * mib)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, a.Free(b))
	}
	before := a.Stats()
	require.Equal(t, int64(limit), before.BytesCached)
	b, err := a.AllocSync(3 * mib)
	require.NoError(t, err)
	st := a.Stats()
	require.Equal(t, uint64(2), st.DriverFrees-before.DriverFrees, "two segments make room for 3 MiB")
	require.Equal(t, int64(4*mib), st.BytesCached, "the rest stays cached")
	require.NoError(t, a.Free(b))
	require.NoError(t, a.CheckPool())
	require.NoError(t, a.Close())
}
