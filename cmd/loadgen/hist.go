package main

import (
	"math"
	"math/bits"
	"time"
)

// histSubBits sets the histogram's precision: every power of two is split
// into 2^histSubBits buckets, so a recorded value is known to within
// 1/2^histSubBits (0.8%) of itself, as an HDR histogram with two
// significant digits is.
const histSubBits = 7

const (
	histHalf  = 1 << histSubBits                     // buckets per power of two above the linear range
	histCount = 2 * histHalf                         // the linear range [0, histCount) is exact
	histLen   = (64-histSubBits)*histHalf + histHalf // enough for any int64
)

// hist is a log-linear histogram of non-negative durations in nanoseconds,
// the layout of an HDR histogram: exact below 256 ns, then 128 buckets per
// power of two. It is not safe for concurrent use: each worker records into
// its own and the report merges them.
type hist struct {
	counts [histLen]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func histIndex(v int64) int {
	if v < histCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1)
	return shift*histHalf + int(uint64(v)>>shift)
}

// histHighest is the largest value that falls into bucket i.
func histHighest(i int) int64 {
	if i < histCount {
		return int64(i)
	}
	shift := i/histHalf - 1
	sub := i - shift*histHalf
	return int64(sub+1)<<shift - 1
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the value at quantile q (0..1): the highest value of the
// bucket that holds the ceil(q*n)-th smallest recording, but never more
// than the largest value recorded. It is 0 for an empty histogram.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(histHighest(i), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}
