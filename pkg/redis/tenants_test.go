package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// TestTenantTables: rows written are read back, each change reaches the
// feed in order (an import as one reset), and a feed trimmed past the
// cursor says so.
func TestTenantTables(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{})
	tt := s.TenantTables()
	_, cursor, err := tt.Changes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := tt.Set(ctx, "api", map[string]string{"acme": "pro"}); err != nil {
		t.Fatal(err)
	}
	if err := tt.Delete(ctx, "api", "gone"); err != nil {
		t.Fatal(err)
	}
	rows := make([][2]string, 1234)
	for i := range rows {
		rows[i] = [2]string{fmt.Sprintf("t%d", i), "10/second"}
	}
	if err := tt.Import(ctx, "api", rows); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := tt.Row(ctx, "api", "acme"); r != "pro" || !ok || err != nil {
		t.Errorf("Row(acme) = %q, %v, %v", r, ok, err)
	}
	if r, ok, err := tt.Row(ctx, "api", "nobody"); ok || err != nil {
		t.Errorf("Row(nobody) = %q, %v, %v: want no row", r, ok, err)
	}
	n := 0
	if err := tt.List(ctx, "api", func(_, _ string) bool { n++; return true }); err != nil || n != 1235 {
		t.Errorf("List: %d rows, %v; want 1235", n, err)
	}
	changes, next, err := tt.Changes(ctx, cursor)
	want := []tenants.Change{{Table: "api", Value: "acme", Row: "pro"}, {Table: "api", Value: "gone"}, {Table: "api", Reset: true}}
	if err != nil || fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("Changes = %v, %v; want %v", changes, err, want)
	}
	if err := c.XTrimMaxLen(ctx, tt.feed(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tt.Set(ctx, "api", map[string]string{"acme": "gold"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tt.Changes(ctx, next); !errors.Is(err, tenants.ErrGap) {
		t.Errorf("Changes after a trim: %v, want ErrGap", err)
	}
	if err := c.Set(ctx, tt.hash("broken"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tt.Row(ctx, "broken", "acme"); err == nil {
		t.Error("Row of a table that is not a hash: no error")
	}
}

// TestTenantCacheRedisDown: with Redis down, a cached tenant keeps its
// row, a new one gets none (the default plan), nothing fails, and the
// failures are counted; once Redis is back (empty, as after a restart
// without persistence) rows are read again as they are used.
func TestTenantCacheRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := New(newClient(t, srv.Addr()), Options{Prefix: "t:"})
	tt := s.TenantTables()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tt.Set(ctx, "api", map[string]string{"acme": "pro"}); err != nil {
		t.Fatal(err)
	}
	c := tenants.NewCache(tt, tenants.Options{RetryAfter: time.Nanosecond})
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	if r := c.Tenant(ctx, "api", "acme"); r == nil || r.Plan != "pro" {
		t.Fatalf("acme: %v, want pro", r)
	}
	srv.Stop()
	c.Apply(tenants.Change{Reset: true}) // as the feed's recovery would: read every row again
	for range 3 {
		if r := c.Tenant(ctx, "api", "acme"); r == nil || r.Plan != "pro" {
			t.Errorf("acme with Redis down: %v, want pro (last seen)", r)
		}
		if r := c.Tenant(ctx, "api", "new"); r != nil {
			t.Errorf("a new tenant with Redis down: %v, want none (the default plan)", r)
		}
	}
	if st := c.Stats(); st.ReadErrors < 4 {
		t.Errorf("%d read errors, want at least 4", st.ReadErrors)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Tenant(ctx, "api", "acme") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("acme still on pro 5 s after an empty Redis came back; stats %+v", c.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.Stats().FeedErrors == 0 {
		t.Error("no feed error counted while Redis was down")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
