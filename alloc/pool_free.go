package alloc

// A freed block's way back into the pool: the recent list, then its
// arena's fit index, merged with its free neighbours (pool.go has the
// pool's layout and its allocation side).

// put returns a freed block to the pool: to recent, moving the oldest
// recent one to its arena when recent is full.
func (p *pool) put(b *block) {
	p.cached += b.class
	b.cached = true
	if p.nRecent < recentBlocks {
		p.recent[p.nRecent] = b
		p.nRecent++
		return
	}
	old := p.recent[0] // the oldest goes; the order stays oldest first
	copy(p.recent[:], p.recent[1:])
	p.recent[recentBlocks-1] = b
	p.merge(old)
}

// mergeRecent moves every recent block to its arena.
func (p *pool) mergeRecent() {
	for i := 0; i < p.nRecent; i++ {
		p.merge(p.recent[i])
		p.recent[i] = nil
	}
	p.nRecent = 0
}

// merge puts a block, counted in cached already, in its arena's index,
// merged with its free neighbours.
func (p *pool) merge(b *block) {
	b.cached = false
	ar := b.seg.ar
	if n := b.segNext; n != nil && n.free {
		ar.free.remove(n)
		p.absorb(b, n)
	}
	if q := b.segPrev; q != nil && q.free {
		ar.free.remove(q)
		p.absorb(q, b)
		b = q
	}
	if b.segPrev == nil && b.segNext == nil { // the segment is one free block now
		p.clock++
		b.seg.idleSince = p.clock
	}
	p.putFree(ar, b)
}

// absorb grows lo over hi, its next neighbour, and recycles hi's record.
func (p *pool) absorb(lo, hi *block) {
	lo.class += hi.class
	lo.segNext = hi.segNext
	if lo.segNext != nil {
		lo.segNext.segPrev = lo
	}
	p.recycle(hi)
}

// recycle keeps a record for record(). It resets only the fields the pool
// sets: a and state stay (state so stale handles stay stale; a because a
// lane Free reads it from a stale handle's record without a.mu, shard.go),
// and a pool block's ws, prof and references are clear. The taker sets
// kind (a pooled block or a hole of an expandable range).
func (p *pool) recycle(b *block) {
	b.ptr, b.size, b.class, b.seg = 0, 0, 0, nil
	b.segPrev, b.segNext, b.freePrev, b.freeNext = nil, p.spare, nil, nil
	b.bucket, b.free, b.cached, b.lastCap = 0, false, false, nil
	p.spare = b
}
