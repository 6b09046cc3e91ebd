package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// batchEntry returns the entry of a request of n hits, each on a counter of
// its own (key<i> under name), of limit.
func batchEntry(t *testing.T, s *Store, name string, n int, limit limiter.Limit) *entry {
	t.Helper()
	hits := make([]limiter.Hit, n)
	for i := range hits {
		hits[i] = limiter.Hit{Key: name + ":" + strconv.Itoa(i), Limit: limit, Hits: 1}
	}
	groups, _ := s.split(hits)
	if len(groups) != 1 {
		t.Fatalf("%d groups, want 1 (a standalone Redis)", len(groups))
	}
	return groups[0].e
}

// runBatch decides es in one script call and returns each entry's error.
func runBatch(s *Store, es ...*entry) []error {
	ps := make([]*pending, len(es))
	for i, e := range es {
		ps[i] = &pending{e: e}
	}
	return runEntries(context.Background(), s.d.ns.one.c, s.d.ns.one.caller, "", ps)
}

// wantAdmitted fails t unless e was admitted with every hit allowed and
// remaining left.
func wantAdmitted(t *testing.T, name string, e *entry, remaining float64) {
	t.Helper()
	if !e.admitted || len(e.hr) != len(e.hits) {
		t.Fatalf("%s: admitted %v with %d hit replies, want admitted with %d", name, e.admitted, len(e.hr), len(e.hits))
	}
	for i, h := range e.hr {
		if !h.allowed || h.remAdmitted != remaining {
			t.Fatalf("%s: hit %d: allowed %v, remaining %v; want allowed, remaining %v", name, i, h.allowed, h.remAdmitted, remaining)
		}
	}
}

// TestBatchEntryOfManyHits: an entry of 300 hits (8 rate limits on 32
// descriptors make 256, past what one byte counts) shares a script call
// with two requests of one hit. Each is decided as it would be alone: all
// admitted with their remaining, and the undo of the big one (a counter
// count past 255 too) takes back its 300 counters.
func TestBatchEntryOfManyHits(t *testing.T) {
	s, c := newTestStore(t, Options{})
	limit := limiter.Limit{Requests: 1000, Window: time.Minute}
	for _, n := range []int{256, 300} {
		name := "big" + strconv.Itoa(n)
		before, big, after := batchEntry(t, s, name+"before", 1, limit), batchEntry(t, s, name, n, limit),
			batchEntry(t, s, name+"after", 1, limit)
		big.full = true // its undo needs the tokens
		for i, err := range runBatch(s, before, big, after) {
			if err != nil {
				t.Fatalf("%d hits: entry %d: %v", n, i, err)
			}
		}
		wantAdmitted(t, "the entry before", before, 999)
		wantAdmitted(t, "the big entry", big, 999)
		wantAdmitted(t, "the entry after", after, 999)
		if _, cur, _, _ := readCounter(t, c, big.keys[n-1]); cur != 1 {
			t.Fatalf("%d hits: the last counter holds %d, want 1", n, cur)
		}
		u, changed := s.d.undoEntry(&group{e: big, replied: true, admitted: true})
		if !changed {
			t.Fatal("undo entry changes nothing")
		}
		if errs := runBatch(s, u); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if u.changed != float64(n) {
			t.Errorf("%d hits: undo changed %v counters, want %d", n, u.changed, n)
		}
		if _, _, _, exists := readCounter(t, c, big.keys[n-1]); exists {
			t.Errorf("%d hits: the last counter exists after the undo, want it taken back", n)
		}
	}
}

// TestBatchEntryFailsAlone: an entry the script fails (a hit on a key that
// is not a counter) and one too large for the layout (65,536 hits) share a
// call with two good requests: each bad one gets an error of its own
// (limiter.ErrStoreUnavailable), and the good ones are decided.
func TestBatchEntryFailsAlone(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	limit := limiter.Limit{Requests: 10, Window: time.Minute}
	good1, good2 := batchEntry(t, s, "good1", 3, limit), batchEntry(t, s, "good2", 1, limit)
	broken := batchEntry(t, s, "broken", 2, limit)
	broken.keys = append(broken.keys, broken.keys[0]+":u:marker")
	broken.specs = append(broken.specs, keySpec{alg: markerAlgorithm})
	broken.hits[1].key = 2 // the marker
	huge := batchEntry(t, s, "huge", 1, limit)
	for range maxEntryCount {
		huge.hits = append(huge.hits, huge.hits[0])
	}
	errs := runBatch(s, good1, broken, huge, good2)
	for i, name := range []string{"good1", "", "", "good2"} {
		if name != "" && errs[i] != nil {
			t.Fatalf("%s: %v", name, errs[i])
		}
	}
	if !errors.Is(errs[1], limiter.ErrStoreUnavailable) || !strings.Contains(errs[1].Error(), "index") {
		t.Errorf("broken entry: %v, want the script's error, wrapping limiter.ErrStoreUnavailable", errs[1])
	}
	if !errors.Is(errs[2], limiter.ErrStoreUnavailable) || !strings.Contains(errs[2].Error(), "65536 hits") {
		t.Errorf("huge entry: %v, want a refusal naming its 65536 hits", errs[2])
	}
	wantAdmitted(t, "good1", good1, 9)
	wantAdmitted(t, "good2", good2, 9)
	// The broken entry's good hit consumed nothing: a second run of its
	// first counter alone is its first hit.
	again := batchEntry(t, s, "broken", 1, limit)
	if errs := runBatch(s, again); errs[0] != nil {
		t.Fatal(errs[0])
	}
	wantAdmitted(t, "broken's first counter", again, 9)
}
