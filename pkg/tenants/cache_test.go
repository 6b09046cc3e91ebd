package tenants

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// fakeSource is a table in a map, with a switch that makes it unreadable.
type fakeSource struct {
	mu    sync.Mutex
	rows  map[string]string // value -> row text, of table "t"
	down  bool
	reads int
}

func (f *fakeSource) Row(_ context.Context, table, value string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.down {
		return "", false, errors.New("connection refused")
	}
	r, ok := f.rows[value]
	return r, ok, nil
}

func (f *fakeSource) Changes(ctx context.Context, cursor string) ([]Change, string, error) {
	<-ctx.Done()
	return nil, cursor, ctx.Err()
}

func (f *fakeSource) set(value, row string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if row == "" {
		delete(f.rows, value)
	} else {
		f.rows[value] = row
	}
	f.down = down
}

func plan(t *testing.T, c *Cache, value string) string {
	t.Helper()
	r := c.Tenant(context.Background(), "t", value)
	if r == nil {
		return "<default>"
	}
	return r.String()
}

// TestCacheReadsOnceAndFollowsChanges: a row, and an absence, are read
// once; a change to a cached row replaces it without a read, a change to a
// value not cached is not cached; a Reset makes rows read again.
func TestCacheReadsOnceAndFollowsChanges(t *testing.T) {
	src := &fakeSource{rows: map[string]string{"acme": "pro"}}
	c := NewCache(src, Options{})
	for range 3 {
		if got := plan(t, c, "acme"); got != "pro" {
			t.Fatalf("acme: %s, want pro", got)
		}
		if got := plan(t, c, "nobody"); got != "<default>" {
			t.Fatalf("nobody: %s, want the default plan", got)
		}
	}
	if src.reads != 2 {
		t.Errorf("%d reads, want 2 (the absence cached too)", src.reads)
	}
	c.Apply(Change{Table: "t", Value: "acme", Row: "10/second"})
	c.Apply(Change{Table: "t", Value: "other", Row: "gold"})
	if got := plan(t, c, "acme"); got != "10/second" || src.reads != 2 {
		t.Errorf("acme after a change: %s with %d reads, want 10/second with 2", got, src.reads)
	}
	if st := c.Stats(); st.Rows != 2 || st.Changes != 2 {
		t.Errorf("stats %+v: want 2 rows and 2 changes", st)
	}
	c.Apply(Change{Table: "t", Value: "acme"})
	if got := plan(t, c, "acme"); got != "<default>" {
		t.Errorf("acme after a deletion: %s", got)
	}
	src.set("nobody", "pro", false)
	c.Apply(Change{Table: "t", Reset: true})
	if got := plan(t, c, "nobody"); got != "pro" || src.reads != 3 {
		t.Errorf("nobody after a reset: %s with %d reads, want pro with 3", got, src.reads)
	}
}

// TestCacheUnreadable: a table that cannot be read gives the row last
// seen, else the default plan, counted, and is not read again at once.
func TestCacheUnreadable(t *testing.T) {
	src := &fakeSource{rows: map[string]string{"acme": "pro"}}
	c := NewCache(src, Options{})
	plan(t, c, "acme")
	src.set("acme", "pro", true)
	c.Apply(Change{Table: "t", Reset: true}) // every row to be read again
	for range 3 {
		if got := plan(t, c, "acme"); got != "pro" {
			t.Errorf("acme with the table down: %s, want pro (last seen)", got)
		}
		if got := plan(t, c, "new"); got != "<default>" {
			t.Errorf("new with the table down: %s, want the default plan", got)
		}
	}
	if st := c.Stats(); st.ReadErrors != 2 || src.reads != 3 {
		t.Errorf("%d read errors, %d reads: want 2 and 3 (no retry within RetryAfter)", st.ReadErrors, src.reads)
	}
}

// TestCacheBound: the cache holds at most about Size rows, the least
// recently used going first.
func TestCacheBound(t *testing.T) {
	src := &fakeSource{rows: map[string]string{}}
	c := NewCache(src, Options{Size: 64})
	for i := range 10_000 {
		c.Tenant(context.Background(), "t", string(rune('a'+i%26))+string(rune(i)))
	}
	if n := c.Stats().Rows; n > 64+shards || n < 32 {
		t.Errorf("%d rows held, want about 64", n)
	}
}
