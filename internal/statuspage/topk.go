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
// total/size is tracked, and each count is at most err too high. It is not
// safe for concurrent use; Recorder guards it.
type topK struct {
	size  int
	index map[string]int // key -> position in items
	items []topItem
}

// topItem is one tracked key: count hits, of which over were over limit;
// count overestimates the true hits by at most err.
type topItem struct {
	key        string
	count, err uint64
	over       uint64
}

func newTopK(size int) *topK {
	return &topK{size: size, index: make(map[string]int, size), items: make([]topItem, 0, size)}
}

// add counts hits (over of them over limit) for key. key may be a view of a
// reused buffer: it is copied only when it becomes a tracked key.
func (t *topK) add(key []byte, hits, over uint64) {
	if i, ok := t.index[string(key)]; ok {
		t.items[i].count += hits
		t.items[i].over += over
		return
	}
	if len(t.items) < t.size {
		k := string(key)
		t.index[k] = len(t.items)
		t.items = append(t.items, topItem{key: k, count: hits, over: over})
		return
	}
	m := 0
	for i := range t.items {
		if t.items[i].count < t.items[m].count {
			m = i
		}
	}
	old := t.items[m]
	delete(t.index, old.key)
	k := string(key)
	t.index[k] = m
	t.items[m] = topItem{key: k, count: old.count + hits, err: old.count, over: over}
}

// reset empties t, keeping its memory.
func (t *topK) reset() {
	clear(t.index)
	t.items = t.items[:0]
}

// merge returns the keys of every summary with their counts summed, the
// largest count first (ties by key), at most n of them.
func merge(n int, sums ...*topK) []topItem {
	pos := map[string]int{}
	var out []topItem
	for _, s := range sums {
		for _, it := range s.items {
			if i, ok := pos[it.key]; ok {
				out[i].count += it.count
				out[i].err += it.err
				out[i].over += it.over
				continue
			}
			pos[it.key] = len(out)
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b topItem) int {
		if a.count != b.count {
			if a.count > b.count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	return out[:min(n, len(out))]
}
