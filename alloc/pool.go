package alloc

// pool caches freed pooled blocks by size class. Reuse is safe without any
// event because every block is only ever used on the allocator's one stream:
// a later user's work is stream-ordered after the earlier user's.
type pool struct {
	small  [numClasses][]*block
	large  map[int64][]*block
	cached int64 // bytes held in the free lists
}

func (p *pool) get(cls int, class int64) *block {
	var list *[]*block
	if cls >= 0 {
		list = &p.small[cls]
	} else {
		l, ok := p.large[class]
		if !ok {
			return nil
		}
		list = &l
		defer func() { p.setLarge(class, *list) }()
	}
	n := len(*list)
	if n == 0 {
		return nil
	}
	b := (*list)[n-1]
	(*list)[n-1] = nil
	*list = (*list)[:n-1]
	p.cached -= b.class
	return b
}

func (p *pool) put(b *block) {
	if b.cls >= 0 {
		p.small[b.cls] = append(p.small[b.cls], b)
	} else {
		if p.large == nil {
			p.large = map[int64][]*block{}
		}
		p.large[b.class] = append(p.large[b.class], b)
	}
	p.cached += b.class
}

func (p *pool) setLarge(class int64, l []*block) {
	if len(l) == 0 {
		delete(p.large, class)
		return
	}
	p.large[class] = l
}

// drain empties the pool and returns every cached block.
func (p *pool) drain() []*block {
	var out []*block
	for i := range p.small {
		out = append(out, p.small[i]...)
		p.small[i] = nil
	}
	for _, l := range p.large {
		out = append(out, l...)
	}
	p.large = nil
	p.cached = 0
	return out
}
