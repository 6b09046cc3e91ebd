package statuspage

import (
	"fmt"
	"testing"
)

// TestTopKHeapAndGuarantee: the summary stays a heap whose index matches,
// and with a few keys above total/size among many below, those keys are
// tracked with exact counts.
func TestTopKHeapAndGuarantee(t *testing.T) {
	tk := newTopK(8)
	for i := range 10_000 {
		tk.add(fmt.Appendf(nil, "noise-%d", i), 1, 0)
		tk.add(fmt.Appendf(nil, "big-%d", i%3), 2, 1)
		for j, it := range tk.heap {
			if l := 2*j + 1; l < len(tk.heap) && tk.heap[l].count < it.count {
				t.Fatalf("step %d: not a heap at %d", i, j)
			}
			if it.pos != j || tk.index[it.key] != it {
				t.Fatalf("step %d: %q at %d says %d, index %p", i, it.key, j, it.pos, tk.index[it.key])
			}
		}
		if len(tk.index) != len(tk.heap) {
			t.Fatalf("step %d: %d indexed, %d in the heap", i, len(tk.index), len(tk.heap))
		}
	}
	top := merge(3, tk)
	for _, it := range top {
		if it.count-it.err != 6666 && it.count-it.err != 6668 || it.err != 0 || it.over*2 != it.count {
			t.Errorf("top item %+v, want a big-N key with an exact count", it)
		}
	}
}
