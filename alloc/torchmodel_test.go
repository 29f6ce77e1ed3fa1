package alloc_test

import (
	"cmp"
	"slices"
)

// torchModel is a model of PyTorch's CUDACachingAllocator policy (c10/cuda,
// no expandable segments, no max_split_size, never released: a trace that
// fits the device), for comparing fragmentation on the same traces:
// requests rounded to 512 B; at most 1 MiB from the small pool's 2 MiB
// segments, else the large pool's (20 MiB segments below 10 MiB, a segment
// of the request rounded to 2 MiB above); the best fit of the pool by
// (size, address); a split when the rest is at least 512 B (small pool)
// or more than 1 MiB (large); a freed block merged with its free
// neighbours. It counts bytes, not memory: addresses are made up.
type torchModel struct {
	pools         [2][]*torchBlock // free blocks, by (size, address)
	next          int64            // the next segment's address
	reserved      int64
	inUse, peakIn int64
	peakReserved  int64
}

type torchBlock struct {
	addr, size int64
	small      bool
	prev, next *torchBlock // neighbours in the segment
	free       bool
	req        int64 // the request it serves, while not free
}

func torchPool(small bool) int {
	if small {
		return 0
	}
	return 1
}

func torchCmp(x, y *torchBlock) int {
	return cmp.Or(cmp.Compare(x.size, y.size), cmp.Compare(x.addr, y.addr))
}

func (m *torchModel) insert(b *torchBlock) {
	p := &m.pools[torchPool(b.small)]
	i, _ := slices.BinarySearchFunc(*p, b, torchCmp)
	*p = slices.Insert(*p, i, b)
	b.free = true
}

func (m *torchModel) remove(b *torchBlock) {
	p := &m.pools[torchPool(b.small)]
	i, ok := slices.BinarySearchFunc(*p, b, torchCmp)
	if !ok {
		panic("torchModel: a free block not in its pool")
	}
	*p = slices.Delete(*p, i, i+1)
	b.free = false
}

// alloc serves a request of n bytes.
func (m *torchModel) alloc(n int64) *torchBlock {
	size := max((n+511)&^511, 512)
	small := size <= 1<<20
	p := m.pools[torchPool(small)]
	i, _ := slices.BinarySearchFunc(p, &torchBlock{size: size}, torchCmp)
	var b *torchBlock
	if i < len(p) {
		b = p[i]
		m.remove(b)
	} else {
		seg := size
		switch {
		case small:
			seg = 2 << 20
		case size < 10<<20:
			seg = 20 << 20
		default:
			seg = (size + 2<<20 - 1) &^ (2<<20 - 1)
		}
		b = &torchBlock{addr: m.next, size: seg, small: small}
		m.next += seg
		m.reserved += seg
		m.peakReserved = max(m.peakReserved, m.reserved)
	}
	if rest := b.size - size; small && rest >= 512 || !small && rest > 1<<20 {
		r := &torchBlock{addr: b.addr + size, size: rest, small: small, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = r
		}
		b.next, b.size = r, size
		m.insert(r)
	}
	b.req = n
	m.inUse += n
	m.peakIn = max(m.peakIn, m.inUse)
	return b
}

// free returns b, merged with its free neighbours.
func (m *torchModel) free(b *torchBlock) {
	m.inUse -= b.req
	if n := b.next; n != nil && n.free {
		m.remove(n)
		absorbNext(b)
	}
	if p := b.prev; p != nil && p.free {
		m.remove(p)
		absorbNext(p)
		b = p
	}
	m.insert(b)
}

// absorbNext grows b over the block after it.
func absorbNext(b *torchBlock) {
	n := b.next
	b.size += n.size
	b.next = n.next
	if b.next != nil {
		b.next.prev = b
	}
}

// runChecked plays tr once on the model, calling check after every op.
func (m *torchModel) runChecked(tr poolTrace, check func(i int)) {
	live := make([]*torchBlock, tr.slots)
	for i, op := range tr.ops {
		if i > 0 {
			check(i - 1)
		}
		if op.size == 0 {
			m.free(live[op.slot])
			live[op.slot] = nil
			continue
		}
		live[op.slot] = m.alloc(op.size)
	}
}
