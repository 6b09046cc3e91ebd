package statuspage

import (
	"slices"
	"strings"
)

// topK is a space-saving summary (Metwally, Agrawal, El Abbadi, "Efficient
// computation of frequent and top-k elements in data streams", 2005): at
// most size counters, whatever the number of distinct keys. A key not
// tracked replaces the counter with the least count and inherits that count
// as its possible overestimate (err), so every key whose true count exceeds
// total/size is tracked, and each count is at most err too high. The
// counters form a min-heap on count, so both an increment and a
// replacement cost O(log size). It is not safe for concurrent use; Recorder
// guards it.
type topK struct {
	size  int
	index map[string]*topItem
	heap  []*topItem // a min-heap on count; each item knows its position
}

// topItem is one tracked key: count hits, of which over were over limit;
// count overestimates the true hits by at most err.
type topItem struct {
	key        string
	count, err uint64
	over       uint64
	pos        int // in topK.heap
}

func newTopK(size int) *topK {
	return &topK{size: size, index: make(map[string]*topItem, size), heap: make([]*topItem, 0, size)}
}

// add counts hits (over of them over limit) for key. key may be a view of a
// reused buffer: it is copied only when it becomes a tracked key. Only a key
// that is not tracked touches the map; the heap moves pointers.
func (t *topK) add(key []byte, hits, over uint64) {
	if it, ok := t.index[string(key)]; ok {
		it.count += hits
		it.over += over
		t.down(it.pos)
		return
	}
	k := string(key)
	if len(t.heap) < t.size {
		it := &topItem{key: k, count: hits, over: over, pos: len(t.heap)}
		t.heap = append(t.heap, it)
		t.index[k] = it
		t.up(it.pos)
		return
	}
	it := t.heap[0] // the least count: its place goes to k
	delete(t.index, it.key)
	*it = topItem{key: k, count: it.count + hits, err: it.count, over: over}
	t.index[k] = it
	t.down(0)
}

// up and down restore the heap after heap[i]'s count fell or rose.
func (t *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].count <= t.heap[i].count {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *topK) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(t.heap) && t.heap[l].count < t.heap[m].count {
			m = l
		}
		if r := l + 1; r < len(t.heap) && t.heap[r].count < t.heap[m].count {
			m = r
		}
		if m == i {
			return
		}
		t.swap(i, m)
		i = m
	}
}

func (t *topK) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].pos, t.heap[j].pos = i, j
}

// reset empties t. Its items are dropped (not reused) so that a merge in
// progress elsewhere never sees them change.
func (t *topK) reset() {
	clear(t.index)
	clear(t.heap)
	t.heap = t.heap[:0]
}

// merge returns the keys of every summary with their counts summed, the
// largest guaranteed count (count - err) first, ties by key, at most n of
// them. Ranking by the guaranteed count keeps a value that just took the
// place of an evicted one (count high, all of it inherited) below the values
// really seen most.
func merge(n int, sums ...*topK) []topItem {
	pos := map[string]int{}
	var out []topItem
	for _, s := range sums {
		for _, it := range s.heap {
			if i, ok := pos[it.key]; ok {
				out[i].count += it.count
				out[i].err += it.err
				out[i].over += it.over
				continue
			}
			pos[it.key] = len(out)
			out = append(out, *it)
		}
	}
	slices.SortFunc(out, func(a, b topItem) int {
		if ga, gb := a.count-a.err, b.count-b.err; ga != gb {
			if ga > gb {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	return out[:min(n, len(out))]
}
