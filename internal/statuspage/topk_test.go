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
		for j := range tk.items {
			if l := 2*j + 1; l < len(tk.items) && tk.items[l].count < tk.items[j].count {
				t.Fatalf("step %d: not a heap at %d", i, j)
			}
			if tk.index[tk.items[j].key] != j {
				t.Fatalf("step %d: index of %q is %d, want %d", i, tk.items[j].key, tk.index[tk.items[j].key], j)
			}
		}
	}
	top := merge(3, tk)
	for _, it := range top {
		if it.count-it.err != 6666 && it.count-it.err != 6668 || it.err != 0 || it.over*2 != it.count {
			t.Errorf("top item %+v, want a big-N key with an exact count", it)
		}
	}
}
