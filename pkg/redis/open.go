package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
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
	// DialTimeout bounds opening one connection. Default 1 s.
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound one socket read or write when the
	// context has no earlier deadline. Default 500 ms each.
	ReadTimeout, WriteTimeout time.Duration
	// CallTimeout bounds each Apply. Default DefaultCallTimeout (15 ms),
	// under Envoy's 20 ms default filter timeout.
	CallTimeout time.Duration
	// Prefix starts every key. Default DefaultPrefix ("sluice:").
	Prefix string
	// TLSCAFile is a PEM file of CAs to verify the server with for rediss://
	// (and TLS to a Sentinel or Cluster). Default the system roots.
	TLSCAFile string
}

// Open connects to the Redis that s selects and returns a Store on it. It
// does not dial: the first Apply or Ping does, so Open succeeds while Redis is
// down. It returns an error for a malformed URL, an unreadable TLSCAFile or
// contradictory settings (Sentinel without addresses, a Cluster with a db).
// Commands are not retried: a script that timed out may have run, and a retry
// could count it twice; the failure mode decides instead. log may be nil.
// Open changes no process-wide state: what go-redis logs by itself goes where
// SetClientLogger sent it (by default, go-redis's stderr logger).
func Open(s Settings, log *zap.Logger) (*Store, error) {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("redis")
	u := &goredis.UniversalOptions{
		PoolSize:              s.PoolSize,
		DialTimeout:           orDefault(s.DialTimeout, time.Second),
		ReadTimeout:           orDefault(s.ReadTimeout, 500*time.Millisecond),
		WriteTimeout:          orDefault(s.WriteTimeout, 500*time.Millisecond),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	if err := applyURL(u, s); err != nil {
		return nil, err
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
		c = goredis.NewClient(u.Simple())
	}
	log.Info("redis store configured", zap.String("mode", mode), zap.String("redis_url", Redacted(s.URL)),
		zap.Strings("addrs", u.Addrs))
	return New(c, Options{Prefix: s.Prefix, CallTimeout: s.CallTimeout, Logger: log}), nil
}

// applyURL sets u's address, credentials, db and TLS from s.URL and
// s.TLSCAFile.
func applyURL(u *goredis.UniversalOptions, s Settings) error {
	if s.URL != "" {
		o, err := goredis.ParseURL(s.URL)
		if err != nil {
			// url.Error quotes the whole URL, password included.
			if ue, ok := errors.AsType[*url.Error](err); ok {
				ue.URL = Redacted(s.URL)
			}
			return fmt.Errorf("parse redis url %s: %w", Redacted(s.URL), err)
		}
		u.Addrs = []string{o.Addr}
		u.Username, u.Password, u.DB = o.Username, o.Password, o.DB
		u.TLSConfig = o.TLSConfig
	}
	if u.TLSConfig == nil && s.TLSCAFile == "" {
		return nil
	}
	if u.TLSConfig == nil {
		u.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return fmt.Errorf("read redis tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("read redis tls ca file %s: no PEM certificate in it", s.TLSCAFile)
		}
		u.TLSConfig.RootCAs = pool
	}
	return nil
}

// SetClientLogger sends what go-redis logs by itself (failed dials, Sentinel
// and Cluster topology events) to log, named "go-redis", at debug level:
// Sluice reports outages itself (readiness, metrics, throttled warnings). A
// nil log drops those messages.
//
// go-redis has one logger per process, not one per client, so this sets
// process-wide state, which a library must not do behind its caller's back:
// only main calls it, once, before Open (STYLE.md: only main replaces
// globals). Without it go-redis writes those messages to stderr itself.
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
// and errors. A string that does not parse as a URL is returned as
// "<unparsable redis url>", since it might hold a password in any place.
func Redacted(rawURL string) string {
	if rawURL == "" {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable redis url>"
	}
	return u.Redacted()
}
