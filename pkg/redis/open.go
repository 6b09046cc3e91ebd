package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// The defaults of Settings' socket timeouts, which the server's
// --redis-*-timeout settings read. A read or write ends at the earlier of
// its timeout and its context's deadline. Every decision's call carries its
// budget as its context's deadline (the caller's deadline, or CallTimeout),
// so the read and write timeouts are only a backstop for a command without
// one: they are as long as envoyproxy/ratelimit's REDIS_TIMEOUT, so that a
// reply a loaded host delays is waited for as long as the caller allows. (At
// 500 ms they cut every budget to 500 ms: a caller allowing 5 s got
// UNAVAILABLE when a reply took 600 ms, and the node was then taken for
// stalled.)
const (
	// DefaultDialTimeout is Settings.DialTimeout when it is zero.
	DefaultDialTimeout = time.Second
	// DefaultReadTimeout is Settings.ReadTimeout when it is zero.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout is Settings.WriteTimeout when it is zero.
	DefaultWriteTimeout = 10 * time.Second
)

// Settings selects and tunes the Redis that Open connects to. Exactly one
// mode applies: Cluster when ClusterAddrs is set, else Sentinel when
// MasterName is set, else standalone at URL. Zero durations and sizes take the
// defaults documented on each field.
type Settings struct {
	// URL is redis://[user[:password]@]host[:port][/db] or rediss://... for
	// TLS (--redis-url, SLUICE_REDIS_URL). In Sentinel and Cluster mode only
	// its user, password, db (0 for a Cluster) and scheme are used, and it may
	// be empty.
	URL string
	// MasterName is the Sentinel master name; with SentinelAddrs it selects
	// Sentinel mode.
	MasterName string
	// SentinelAddrs are the Sentinels' host:port addresses.
	SentinelAddrs []string
	// ClusterAddrs are seed host:port addresses of a Redis Cluster; setting
	// them selects Cluster mode.
	ClusterAddrs []string
	// PoolSize is the number of connections per Redis node. Default go-redis's
	// (10 per CPU).
	PoolSize int
	// DialTimeout bounds opening one connection. Default
	// DefaultDialTimeout (1 s).
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound one socket read or write when the
	// context has no earlier deadline. Default DefaultReadTimeout and
	// DefaultWriteTimeout (10 s each); a shorter one also cuts every
	// decision's budget to it.
	ReadTimeout, WriteTimeout time.Duration
	// CallTimeout is Options.CallTimeout: the budget of an Apply whose
	// caller set no deadline. Default DefaultCallTimeout (1 s).
	CallTimeout time.Duration
	// Prefix starts every key. Default DefaultPrefix ("sluice:").
	Prefix string
	// CallsInFlight is Options.CallsInFlight: the most script calls in
	// flight per node. Default DefaultCallsInFlight (1).
	CallsInFlight int
	// MaxCallsInFlight is Options.MaxCallsInFlight: the most script calls
	// in flight per node while the oldest is slow. Default
	// DefaultMaxCallsInFlight (4).
	MaxCallsInFlight int
	// LeaseRate and LeaseSpan are Options.LeaseRate and Options.LeaseSpan:
	// hot-key leases (see Store). LeaseRate 0 turns leases off; a server
	// passes DefaultLeaseRate unless told otherwise.
	LeaseRate float64
	LeaseSpan time.Duration
	// TLSCAFile is a PEM file of CAs to verify the server with for rediss://
	// (and TLS to a Sentinel or Cluster). Default the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and its key,
	// presented to a Redis that requires TLS client authentication. Set both
	// or neither; they need TLS (rediss://).
	TLSCertFile, TLSKeyFile string
	// TLSSkipHostnameVerification verifies the server's certificate chain
	// but not that it names the host dialled (envoyproxy/ratelimit's
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION), for Redis reached through an
	// address its certificate does not list.
	TLSSkipHostnameVerification bool
	// TLSSetting names what turned TLS on (e.g. "REDIS_TLS=true"), for the
	// error of a handshake with a server that does not speak TLS. Default:
	// the rediss:// scheme of URL, or the TLS files.
	TLSSetting string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// themselves (not to the master, whose credentials are in URL). Empty
	// means no AUTH to the Sentinels.
	SentinelUsername, SentinelPassword string
}

// Open connects to the Redis that s selects and returns a Store on it. It
// does not dial: the first Apply or Ping does, so Open succeeds while Redis is
// down. It returns an error for a malformed URL, an unreadable TLSCAFile or
// contradictory settings (Sentinel without addresses, a Cluster with a db).
// Commands are not retried: a script that timed out may have run, and a retry
// could count it twice; the failure mode decides instead. Nor are dials,
// within one call: the next call dials again. log may be nil.
// Open changes no process-wide state: what go-redis logs by itself goes where
// SetClientLogger sent it (by default, go-redis's stderr logger).
func Open(s Settings, log *zap.Logger) (*Store, error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("redis")
	u := &goredis.UniversalOptions{
		PoolSize:              s.PoolSize,
		DialTimeout:           orDefault(s.DialTimeout, DefaultDialTimeout),
		ReadTimeout:           orDefault(s.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:          orDefault(s.WriteTimeout, DefaultWriteTimeout),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		// One dial attempt per connection: go-redis dials in the background
		// and by default retries 5 times 100 ms apart, far past a call's
		// 15 ms budget, so the caller saw only "context deadline exceeded"
		// instead of the dial's own error (connection refused, no such host).
		DialerRetries: 1,
	}
	tlsOn, network := false, ""
	if s.URL != "" {
		o, err := goredis.ParseURL(s.URL)
		if err != nil {
			return nil, urlError(s.URL, err)
		}
		u.Addrs = []string{o.Addr}
		u.Username, u.Password, u.DB = o.Username, o.Password, o.DB
		tlsOn, network = o.TLSConfig != nil, o.Network
		u.TLSConfig = o.TLSConfig
	}
	u.SentinelUsername, u.SentinelPassword = s.SentinelUsername, s.SentinelPassword
	if tlsOn || s.TLSCAFile != "" || s.TLSCertFile != "" || s.TLSSkipHostnameVerification {
		if u.TLSConfig == nil {
			u.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if err := s.configureTLS(u.TLSConfig); err != nil {
			return nil, err
		}
		by := "the rediss:// scheme of the Redis URL"
		if !tlsOn {
			by = "a Redis TLS file or setting"
		}
		u.Dialer = tlsDialer(u.TLSConfig, u.DialTimeout, cmp.Or(s.TLSSetting, by))
	}

	var c goredis.UniversalClient
	mode := "standalone"
	switch {
	case len(s.ClusterAddrs) > 0:
		if u.DB != 0 {
			return nil, fmt.Errorf("redis cluster has only db 0, url selects db %d", u.DB)
		}
		mode = "cluster"
		u.Addrs = s.ClusterAddrs
		u.IsClusterMode = true
		c = goredis.NewClusterClient(u.Cluster())
	case s.MasterName != "":
		if len(s.SentinelAddrs) == 0 {
			return nil, errors.New("redis sentinel master name set without sentinel addresses")
		}
		mode = "sentinel"
		u.Addrs = s.SentinelAddrs
		u.MasterName = s.MasterName
		c = goredis.NewFailoverClient(u.Failover())
	default:
		if s.URL == "" {
			return nil, errors.New("redis url is empty and neither sentinel nor cluster is set")
		}
		o := u.Simple()
		if network == "unix" {
			o.Network = "unix" // unix:///path/to/socket
			mode = "standalone (unix socket)"
		}
		c = goredis.NewClient(o)
	}
	log.Info("redis store configured", zap.String("mode", mode), zap.String("redis_url", Redacted(s.URL)),
		zap.Strings("addrs", u.Addrs))
	return New(c, Options{Prefix: s.Prefix, CallTimeout: s.CallTimeout, CallsInFlight: s.CallsInFlight, MaxCallsInFlight: s.MaxCallsInFlight,
		LeaseRate: s.LeaseRate, LeaseSpan: s.LeaseSpan, Logger: log}), nil
}

// configureTLS adds the CA, the client certificate and the hostname policy
// of s to cfg.
func (s Settings) configureTLS(cfg *tls.Config) error {
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return fmt.Errorf("read redis tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("read redis tls ca file %s: no PEM certificate in it", s.TLSCAFile)
		}
		cfg.RootCAs = pool
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		return errors.New("redis tls client certificate: set both the certificate and the key file, or neither")
	}
	if s.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("read redis tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if s.TLSSkipHostnameVerification {
		// Go verifies the chain and the name together; skip both and verify
		// the chain here, against the same roots, without a name.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis tls: server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return nil
}

// urlError explains a Redis URL that does not parse, showing it with any
// password masked, and says which forms are accepted.
func urlError(raw string, err error) error {
	// url.Error quotes the whole URL, password included.
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	msg := err.Error()
	if !strings.Contains(raw, "://") {
		msg = "no scheme"
	}
	return fmt.Errorf("redis url %q: %s (want redis://host:port[/db], rediss://host:port for TLS, or unix:///path/to/socket; "+
		"credentials go in the URL: redis://user:password@host:port)", Redacted(raw), msg)
}

// SetClientLogger sends what go-redis logs by itself (failed dials, Sentinel
// and Cluster topology events) to log, named "go-redis", at debug level:
// Sluice reports outages itself (readiness, metrics, throttled warnings). A
// nil log drops those messages.
//
// go-redis has one logger per process, not one per client, so this sets
// process-wide state, which a library must not do behind its caller's back:
// only main calls it, once, before Open (only main replaces process-wide
// state). Without it go-redis writes those messages to stderr itself.
func SetClientLogger(log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	goredis.SetLogger(zapPrintf{log.Named("go-redis")})
}

// zapPrintf adapts a zap logger to go-redis's Printf logger.
type zapPrintf struct{ log *zap.Logger }

// Printf logs one go-redis message at debug level, formatted only when
// debug is enabled. It is safe for concurrent use, as go-redis requires.
func (z zapPrintf) Printf(_ context.Context, format string, v ...any) {
	if ce := z.log.Check(zap.DebugLevel, "go-redis"); ce != nil {
		ce.Write(zap.String("message", fmt.Sprintf(format, v...)))
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Redacted returns rawURL with its password replaced by "xxxxx", for logs
// and errors. A string that does not parse as a URL is masked by its shape:
// whatever stands between the first ':' after the scheme and the last '@'
// is the password.
func Redacted(rawURL string) string {
	if rawURL == "" {
		return ""
	}
	if u, err := url.Parse(rawURL); err == nil && (u.User != nil || !strings.Contains(rawURL, "@")) {
		return u.Redacted()
	}
	start := 0
	if i := strings.Index(rawURL, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndex(rawURL, "@")
	if at < start {
		return rawURL
	}
	colon := strings.Index(rawURL[start:at], ":")
	if colon < 0 {
		return rawURL // a user name only
	}
	return rawURL[:start+colon+1] + "xxxxx" + rawURL[at:]
}

// Ready prepares the Store to answer at once: it opens the connection pool
// of every master (PoolSize connections each, or go-redis's default) and
// loads the limiter library (Warm). It returns nil only when all of it
// succeeded, and an error wrapping limiter.ErrStoreUnavailable otherwise;
// it may be called again after an error. A readiness check that waits for
// it keeps a new instance out of a load balancer until its decisions need
// no dial: under load, a first call that dials inside its CallTimeout times
// out, and the node counts as stalled until a PING answers. It is safe for
// concurrent use; each call takes at most about PingTimeout.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var err error
	switch c := s.c.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return openPool(ctx, n) })
	case *goredis.Client:
		err = openPool(ctx, c)
	}
	if err != nil {
		return fmt.Errorf("%w: open redis connections: %w", limiter.ErrStoreUnavailable, err)
	}
	return s.Warm(ctx)
}

// openPool dials the connections of c's pool that are not open yet and
// leaves them idle in the pool. It dials one after another: go-redis's
// connection handshake is not safe for concurrent use through several
// Conns of one client (the race detector finds it), and a dial is a few
// round trips, so a pool of 20 opens within milliseconds.
func openPool(ctx context.Context, c *goredis.Client) error {
	conns := make([]*goredis.Conn, 0, c.Options().PoolSize)
	defer func() {
		for _, cn := range conns {
			cn.Close() // back to the pool, open
		}
	}()
	for range cap(conns) {
		cn := c.Conn()
		conns = append(conns, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// NoEviction returns the address of every master whose maxmemory-policy is
// noeviction (Redis's default), sorted. Such a Redis, once it reaches its
// maxmemory, refuses every write ("OOM command not allowed"), so a flood
// of distinct descriptor values makes every decision fail, for every
// client; with allkeys-lru or volatile-lru it forgets the least recently
// used counters instead (every key Sluice writes has a TTL, so both evict
// only counters on a Redis of its own). A master that refuses CONFIG GET
// (managed Redis services often do) or does not answer within PingTimeout
// is left out: the check is advice, never a reason not to start. It is
// safe for concurrent use.
func (s *Store) NoEviction(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var mu sync.Mutex
	var out []string
	check := func(ctx context.Context, c *goredis.Client) error {
		if p, err := c.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil && p["maxmemory-policy"] == "noeviction" {
			addr := c.Options().Addr
			if addr == "FailoverClient" { // go-redis's name for a Sentinel's master
				addr = "the Sentinel master"
			}
			mu.Lock()
			out = append(out, addr)
			mu.Unlock()
		}
		return nil
	}
	switch c := s.c.(type) {
	case *goredis.ClusterClient:
		c.ForEachMaster(ctx, check)
	case *goredis.Client:
		check(ctx, c)
	}
	slices.Sort(out)
	return out
}
