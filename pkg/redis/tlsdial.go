package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// plainProbeAfter is how long a TLS handshake runs before tlsDialer asks,
// on a second connection, whether the server speaks plain Redis. A TLS
// handshake with a nearby Redis takes a few milliseconds, so a TLS server
// seldom sees the probe.
const plainProbeAfter = 100 * time.Millisecond

// errNotTLS is the cause tlsDialer cancels a handshake with when the server
// answered the probe in plain Redis.
var errNotTLS = errors.New("the server speaks plain Redis, not TLS")

// tlsDialer returns the dialer of a TLS connection to Redis: a connection
// as go-redis dials one (its keep-alives, dialTimeout), then the handshake
// with cfg within ctx. It says what is wrong when the server does not speak
// TLS: a plain Redis reads the ClientHello as the start of a command and
// answers nothing, so the handshake would only end at the deadline
// ("context deadline exceeded"). Once the handshake has run
// plainProbeAfter, the dialer sends PING without TLS on a second
// connection; a RESP answer ends the dial with an error naming the address
// and tlsBy, what turned TLS on.
func tlsDialer(cfg *tls.Config, dialTimeout time.Duration, tlsBy string) func(context.Context, string, string) (net.Conn, error) {
	plain := goredis.NewDialer(&goredis.Options{DialTimeout: dialTimeout})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := plain(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" { // as tls.Dial: the host dialled (a socket's path)
			c = cfg.Clone()
			c.ServerName = addr
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		conn := tls.Client(raw, c)
		hctx, cancel := context.WithCancelCause(ctx)
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			select {
			case <-hctx.Done():
				return
			case <-time.After(plainProbeAfter):
			}
			if speaksPlainRedis(hctx, plain, network, addr) {
				cancel(errNotTLS)
			}
		}()
		err = conn.HandshakeContext(hctx)
		cause := context.Cause(hctx)
		cancel(nil)
		<-probed
		if err != nil {
			raw.Close()
			if errors.Is(cause, errNotTLS) {
				return nil, fmt.Errorf("redis tls handshake with %s: %w, but %s turns TLS on "+
					"(turn TLS off for this server, or on in Redis with tls-port)", addr, errNotTLS, tlsBy)
			}
			return nil, err
		}
		return conn, nil
	}
}

// speaksPlainRedis reports whether the server at addr answers a PING sent
// without TLS in RESP: a status ("+PONG") or an error ("-NOAUTH ...").
// A TLS server answers such bytes with an alert, or closes.
func speaksPlainRedis(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), network, addr string) bool {
	c, err := dial(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}
