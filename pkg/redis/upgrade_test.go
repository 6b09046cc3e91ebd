package redis

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// le64 appends the little-endian bytes of float64 v to b.
func le64(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

// TestReadsCountersOf030 writes counters as 0.3.0 stored them (a sliding
// window of sub-windows: its slots newest first, one byte each, then the
// head '<dddBB' at, total, at's count, width, salt; a fixed window '<dd'
// index and count), with their TTLs, and requires the script to read them:
// the counts they hold decide, a hit in the stored sub-window or window
// changes them in place and keeps their TTL, and a hit in a later
// sub-window rewrites the string in the same layout.
func TestReadsCountersOf030(t *testing.T) {
	now := int64(1_700_000_000_000)
	s, c := newTestStore(t, Options{Now: func() time.Time { return time.UnixMilli(now) }})
	ctx := context.Background()

	sub := limiter.Limit{Requests: 10, Window: time.Minute, SubWindows: 12} // sub-windows of 5 s
	hs := limiter.Hit{Key: "sub", Limit: sub, Hits: 1}
	j := float64(now / 5000)
	v := make([]byte, 12)
	v[0] = 4                         // sub-window j-1
	v = le64(le64(le64(v, j), 7), 3) // at j: 3 hits, 7 in all
	v = append(v, 1, 9)              // width 1, a salt
	ks := counterKey(s.prefix, hs)
	if err := c.Set(ctx, ks, v, 65*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	hf := limiter.Hit{Key: "fixed", Limit: limiter.Limit{Requests: 10, Window: time.Minute, Algorithm: limiter.FixedWindow}, Hits: 1}
	kf := counterKey(s.prefix, hf)
	if err := c.Set(ctx, kf, le64(le64(nil, float64(now/60000)), 4), 40*time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	rs, err := s.Apply(ctx, []limiter.Hit{hs, hf})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Allowed || rs[0].Remaining != 2 || !rs[1].Allowed || rs[1].Remaining != 5 {
		t.Fatalf("results %+v: want allowed, 2 (7 + 1 of 10) and 5 (4 + 1 of 10) remaining", rs)
	}
	got, err := c.Get(ctx, ks).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, v[:20]...), le64(le64(nil, 8), 4)...)
	if string(got[:36]) != string(want) || len(got) != 38 {
		t.Errorf("sub-window counter = %x, want %x and its width and salt", got, want)
	}
	if ttl := c.PTTL(ctx, ks).Val(); ttl > 65*time.Second || ttl < 60*time.Second {
		t.Errorf("sub-window counter's PTTL = %v, want the 65 s it had", ttl)
	}
	if got := c.Get(ctx, kf).Val(); got != string(le64(le64(nil, float64(now/60000)), 5)) {
		t.Errorf("fixed window counter = %x, want its index and 5", got)
	}
	if ttl := c.PTTL(ctx, kf).Val(); ttl > 40*time.Second || ttl < 35*time.Second {
		t.Errorf("fixed window counter's PTTL = %v, want the 40 s it had", ttl)
	}

	now += 5000 // the next sub-window: j-1 is still in the estimate
	rs, err = s.Apply(ctx, []limiter.Hit{hs})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Allowed || rs[0].Remaining != 1 {
		t.Fatalf("next sub-window: %+v, want allowed, 1 remaining (9 of 10)", rs[0])
	}
	st, ok := readState(t, c, s.prefix, idOf(hs))
	if !ok || st.At != int64(j)+1 || len(st.Slots) != 13 || st.Slots[10] != 4 || st.Slots[11] != 4 || st.Slots[12] != 1 {
		t.Errorf("next sub-window: state %+v (exists %v), want at j+1 holding 4, 4 and 1", st, ok)
	}
}
