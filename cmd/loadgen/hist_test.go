package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistIndexRoundTrip(t *testing.T) {
	prev := -1
	for _, v := range []int64{0, 1, 255, 256, 257, 511, 512, 1000, 1 << 20, 123456789, 1<<62 + 12345, 1<<63 - 1} {
		i := histIndex(v)
		if i < prev {
			t.Errorf("histIndex(%d) = %d, below the index of a smaller value (%d)", v, i, prev)
		}
		prev = i
		if i >= histLen {
			t.Fatalf("histIndex(%d) = %d, want < %d", v, i, histLen)
		}
		hi := histHighest(i)
		if hi < v {
			t.Errorf("histHighest(histIndex(%d)) = %d, want >= %d", v, hi, v)
		}
		if hi != v && float64(hi-v) > float64(v)/histHalf {
			t.Errorf("bucket of %d reaches %d: more than 1/%d above", v, hi, histHalf)
		}
	}
}

func TestHistQuantilesMatchSorted(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h hist
	vals := make([]int64, 100_000)
	for i := range vals {
		vals[i] = int64(r.ExpFloat64() * 200_000) // ns, mean 200 µs
		h.record(time.Duration(vals[i]))
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := vals[int(q*float64(len(vals)-1))]
		got := int64(h.quantile(q))
		if got < want || float64(got-want) > float64(want)/histHalf+1 {
			t.Errorf("quantile(%v) = %d, want %d within 1/%d", q, got, want, histHalf)
		}
	}
	if got := int64(h.quantile(1)); got != vals[len(vals)-1] {
		t.Errorf("quantile(1) = %d, want the max %d", got, vals[len(vals)-1])
	}
	var m hist
	m.merge(&h)
	m.merge(&hist{})
	if m.n != h.n || m.quantile(0.99) != h.quantile(0.99) || m.max != h.max {
		t.Errorf("merge into empty changed the histogram")
	}
}
