package redis

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestTLSToPlainRedis: TLS against a Redis that does not speak it says so,
// naming the address and what turned TLS on, instead of "context deadline
// exceeded" (a plain Redis answers a ClientHello with nothing); TLS to a
// TLS Redis still works through the same dialer.
func TestTLSToPlainRedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	for _, tc := range []struct{ setting, want string }{
		{"REDIS_TLS=true", "REDIS_TLS=true turns TLS on"},
		{"", "the rediss:// scheme of the Redis URL turns TLS on"},
	} {
		s, err := Open(Settings{URL: "rediss://" + addr, TLSSetting: tc.setting}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Ready(context.Background())
		s.Close()
		if !errors.Is(err, limiter.ErrStoreUnavailable) || !strings.Contains(err.Error(), "redis tls handshake with "+addr+": the server speaks plain Redis, not TLS") ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ready over TLS to plain Redis (TLSSetting %q) = %v, want ErrStoreUnavailable naming %s, the plain server and %q", tc.setting, err, addr, tc.want)
		}
	}

	srv, ca := redistest.StartTLS(t)
	s, err := Open(Settings{URL: "rediss://" + srv.Addr(), TLSCAFile: ca, PoolSize: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping over TLS to a TLS Redis = %v", err)
	}
}
