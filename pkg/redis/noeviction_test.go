package redis

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestNoEviction: a Redis with the default maxmemory-policy, noeviction, is
// named (once full it would refuse every write, and so every decision); an
// evicting policy is not; a user denied CONFIG (as on managed Redis
// services) is skipped without an error.
func TestNoEviction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	open := func(url string) *Store {
		s, err := Open(Settings{URL: url}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	admin := open("redis://" + srv.Addr())
	if got := admin.NoEviction(context.Background()); !slices.Equal(got, []string{srv.Addr()}) {
		t.Errorf("NoEviction with Redis's default policy = %q, want [%s]", got, srv.Addr())
	}
	if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-config"); err != nil {
		t.Fatal(err)
	}
	if got := open("redis://limited:pw@" + srv.Addr()).NoEviction(context.Background()); len(got) != 0 {
		t.Errorf("NoEviction for a user denied CONFIG = %q, want none (skipped)", got)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		if _, err := redistest.Do(srv.Addr(), "CONFIG", "SET", "maxmemory-policy", policy); err != nil {
			t.Fatal(err)
		}
		if got := admin.NoEviction(context.Background()); len(got) != 0 {
			t.Errorf("NoEviction with %s = %q, want none", policy, got)
		}
	}
}
