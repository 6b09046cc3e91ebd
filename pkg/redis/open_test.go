package redis

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

func TestRedacted(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://:s3cret@localhost:6379", "redis://:xxxxx@localhost:6379"},
		{"rediss://user:s3cret@redis.example:6380/2", "rediss://user:xxxxx@redis.example:6380/2"},
		{"redis://user@localhost", "redis://user@localhost"},
		// Not a URL: masked by its shape, so the problem stays visible.
		{"redis://u:s3cret@host:bad port", "redis://u:xxxxx@host:bad port"},
		{"u:s3cret@host:6379", "u:xxxxx@host:6379"},
		{"127.0.0.1:6390", "127.0.0.1:6390"},
	} {
		if got := Redacted(tc.in); got != tc.want {
			t.Errorf("Redacted(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// applyOnce sends one hit through s and fails t on an error.
func applyOnce(t *testing.T, s *Store, key string) limiter.Result {
	t.Helper()
	res, err := s.Apply(context.Background(), []limiter.Hit{perMinute(key, 5)})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res[0]
}

func TestOpenStandaloneACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", "sluice", "on", ">s3cret", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Settings{URL: "redis://sluice:s3cret@" + srv.Addr() + "/2", CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if r := applyOnce(t, s, "a"); !r.Allowed || r.Remaining != 4 {
		t.Errorf("first hit = %+v, want Allowed with 4 remaining", r)
	}
	// The counter is in db 2.
	if n, err := redistest.Do(srv.Addr(), "DBSIZE"); err != nil || n != int64(0) {
		t.Errorf("DBSIZE of db 0 = %v, %v, want 0", n, err)
	}

	wrong, err := Open(Settings{URL: "redis://sluice:wrong@" + srv.Addr(), CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	_, err = wrong.Apply(context.Background(), []limiter.Hit{perMinute("a", 5)})
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Apply with a wrong password = %v, want ErrStoreUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong") {
		t.Errorf("error %q shows the password", err)
	}
}

func TestOpenSentinel(t *testing.T) {
	t.Parallel()
	sentinel, _ := redistest.Sentinel(t)
	s, err := Open(Settings{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel}, CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	applyOnce(t, s, "a")
	if r := applyOnce(t, s, "a"); r.Remaining != 3 {
		t.Errorf("second hit = %+v, want 3 remaining", r)
	}
}

func TestOpenCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	prefix := redistest.Prefix(t.Name())
	s, err := Open(Settings{ClusterAddrs: addrs[:1], Prefix: prefix, CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := newClusterClient(t, addrs)
	t.Cleanup(func() { deletePrefix(t, admin, prefix) })
	if s.d.ns.cluster == nil {
		t.Fatal("Open with ClusterAddrs did not make a cluster Store")
	}
	keys := clusterKeys(t, admin, 3, time.Minute)
	hits := []limiter.Hit{perMinute(keys[0], 2), perMinute(keys[1], 2), perMinute(keys[2], 2)}
	for i := range 3 {
		res, err := s.Apply(context.Background(), hits)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range res {
			if r.Allowed != (i < 2) {
				t.Errorf("request %d hit %d = %+v, want Allowed %v", i, j, r, i < 2)
			}
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    Settings
		want string
	}{
		{"no address", Settings{}, "redis url is empty"},
		{"bad scheme", Settings{URL: "http://u:s3cret@localhost"}, `redis url "http://u:xxxxx@localhost": redis: invalid URL scheme: http`},
		{"bad url", Settings{URL: "redis://u:s3cret@host:bad port"}, `invalid port ":bad port" after host`},
		{"sentinel without addresses", Settings{MasterName: "m"}, "without sentinel addresses"},
		{"cluster with a db", Settings{URL: "redis://localhost/3", ClusterAddrs: []string{"localhost:7000"}}, "only db 0"},
		{"missing ca file", Settings{URL: "rediss://localhost", TLSCAFile: filepath.Join(dir, "none.pem")}, "tls ca file"},
		{"ca file without pem", Settings{URL: "rediss://localhost", TLSCAFile: notPEM}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.s, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%+v) succeeded, want an error containing %q", tc.s, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open error = %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Open error = %q shows the password", err)
			}
		})
	}
}

func TestOpenTLS(t *testing.T) {
	t.Parallel()
	srv, ca := redistest.StartTLS(t)
	s, err := Open(Settings{URL: "rediss://" + srv.Addr(), TLSCAFile: ca, CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping over TLS: %v", err)
	}
	applyOnce(t, s, "a")

	// Without the CA the server is not trusted.
	untrusted, err := Open(Settings{URL: "rediss://" + srv.Addr(), CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if err := untrusted.Ping(context.Background()); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Ping over TLS without the CA = %v, want ErrStoreUnavailable", err)
	}
}

// TestSentinelFailover: after the master dies and the Sentinels promote its
// replica, the same Store decides on the new master (counters written before
// the failover were replicated, so they carry over).
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	f := redistest.Failover(t)
	s, err := Open(Settings{MasterName: redistest.SentinelMaster, SentinelAddrs: f.SentinelAddrs(), CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	applyOnce(t, s, "a")
	// Wait until the replica has the counter, then kill the master.
	deadlineFor(t, 10*time.Second, func() bool {
		n, err := redistest.Do(f.Replica.Addr(), "DBSIZE")
		return err == nil && n == int64(1)
	}, "the replica has the counter (DBSIZE 1)")
	f.Master.Stop()
	took, err := f.WaitPromoted(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica promoted after %v", took)
	var res []limiter.Result
	deadlineFor(t, 10*time.Second, func() bool {
		res, err = s.Apply(context.Background(), []limiter.Hit{perMinute("a", 5)})
		if err != nil && !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("Apply after failover = %v, want ErrStoreUnavailable while it fails", err)
		}
		return err == nil
	}, "Apply answering after the promotion")
	if res[0].Remaining != 3 {
		t.Errorf("second hit after failover = %+v, want 3 remaining (the first was replicated)", res[0])
	}
}

// TestOpenURLErrors: a URL that does not parse is named, with its password
// masked but the rest shown, and the accepted forms are listed.
func TestOpenURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6390", `redis url "127.0.0.1:6390": no scheme (want redis://host:port[/db]`},
		{"redis.redis.svc:6379", `redis url "redis.redis.svc:6379": no scheme (want redis://host:port[/db]`},
		{"redis://u:s3cret@host:bad port", `redis url "redis://u:xxxxx@host:bad port": `},
		{"http://host:6379", `redis url "http://host:6379": redis: invalid URL scheme: http (want`},
	} {
		_, err := Open(Settings{URL: tc.url}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error starting %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error %q shows the password", tc.url, err)
		}
	}
}

// TestOpenUnixSocket: unix:///path reaches a Redis on its unix socket.
func TestOpenUnixSocket(t *testing.T) {
	t.Parallel()
	_, sock := redistest.StartUnix(t)
	s, err := Open(Settings{URL: "unix://" + sock, CallTimeout: testTimeout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := applyOnce(t, s, "unix"); !r.Allowed || r.Remaining != 4 {
		t.Errorf("first hit = %+v, want Allowed with 4 remaining", r)
	}
}

// TestOpenTLSSkipHostname: a certificate for 127.0.0.1 reached as
// "localhost" fails verification, unless the hostname check is skipped; the
// chain is still checked (a CA that did not sign it fails).
func TestOpenTLSSkipHostname(t *testing.T) {
	t.Parallel()
	srv, ca := redistest.StartTLS(t)
	_, port, _ := strings.Cut(srv.Addr(), ":")
	url := "rediss://localhost:" + port
	for _, tc := range []struct {
		name   string
		skip   bool
		caFile string
		ok     bool
	}{
		{"hostname checked", false, ca, false},
		{"hostname skipped", true, ca, true},
		{"hostname skipped, wrong CA", true, otherCA(t), false},
	} {
		s, err := Open(Settings{URL: url, TLSCAFile: tc.caFile, TLSSkipHostnameVerification: tc.skip, CallTimeout: time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Ping(context.Background())
		s.Close()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Ping = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// otherCA writes the CA of a second, unrelated TLS Redis.
func otherCA(t *testing.T) string {
	_, ca := redistest.StartTLS(t)
	return ca
}

func TestOpenTLSClientCertNeedsKey(t *testing.T) {
	_, err := Open(Settings{URL: "rediss://127.0.0.1:1", TLSCertFile: "cert.pem"}, nil)
	if err == nil || !strings.Contains(err.Error(), "set both") {
		t.Errorf("Open with a certificate and no key = %v, want an error", err)
	}
}

// TestClientLogger: go-redis's own messages reach the logger given to
// SetClientLogger, at debug level, and Open does not take them over. Not
// parallel: it sets go-redis's process-wide logger (and puts go-redis's
// default back at the end).
func TestClientLogger(t *testing.T) {
	routed, routedLogs := observer.New(zap.DebugLevel)
	SetClientLogger(zap.New(routed))
	t.Cleanup(logging.Enable)
	opened, openedLogs := observer.New(zap.DebugLevel)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String() // nothing listens there once closed
	l.Close()
	st, err := Open(Settings{MasterName: "m", SentinelAddrs: []string{closed}}, zap.New(opened))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(context.Background()); err == nil {
		t.Fatal("Ping through an unreachable Sentinel succeeded")
	}
	got := routedLogs.FilterLoggerName("go-redis").FilterLevelExact(zap.DebugLevel).FilterField(zap.String("message",
		`sentinel: GetMasterAddrByName addr=`+closed+`, master="m" failed: dial tcp `+closed+`: connect: connection refused`))
	if got.Len() == 0 {
		t.Errorf("SetClientLogger's logger got %+v, want go-redis's sentinel failure at debug level", routedLogs.All())
	}
	if n := openedLogs.FilterLoggerName("redis.go-redis").Len(); n != 0 {
		t.Errorf("Open's logger got %d go-redis messages, want none (Open must not set go-redis's global logger)", n)
	}
}

// TestReadyOpensThePool: Ready opens every connection of the pool and loads
// the library, so that the decisions after it dial nothing; against a Redis
// that is down it returns an error wrapping ErrStoreUnavailable.
func TestReadyOpensThePool(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	s, err := Open(Settings{URL: "redis://" + addr, PoolSize: 7, Prefix: redistest.Prefix(t.Name())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.c.(interface{ PoolStats() *goredis.PoolStats })
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	if st := c.PoolStats(); st.TotalConns != 7 || st.IdleConns != 7 {
		t.Errorf("after Ready: %d connections, %d idle; want the pool's 7, all idle", st.TotalConns, st.IdleConns)
	}
	if s.d.ns.caller.mode.Load() == modeUnknown {
		t.Error("after Ready the library is not loaded")
	}
	misses := c.PoolStats().Misses
	res, err := s.Apply(context.Background(), []limiter.Hit{perMinute(redistest.Prefix(t.Name())+"k", 2)})
	if err != nil || !res[0].Allowed {
		t.Fatalf("Apply after Ready = %v, %v", res, err)
	}
	if st := c.PoolStats(); st.Misses != misses || st.TotalConns != 7 {
		t.Errorf("Apply after Ready dialed: %+v", st)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	ln.Close()
	d, err := Open(Settings{URL: "redis://" + down}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Ready(context.Background()); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Ready with Redis down = %v, want ErrStoreUnavailable", err)
	}
}
