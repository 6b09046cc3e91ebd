package app

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// The one launcher of the tests that start the server in-process: start,
// and launch, launchWith and startServer for its usual forms.

// running is a server started by start.
type running struct {
	srv    *server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	once   sync.Once
	done   chan error
	cancel context.CancelFunc
	err    error
}

// stop shuts the server down as SIGTERM would and returns serve's error. It
// may be called more than once.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(15 * time.Second):
			r.err = errors.New("server did not stop within 15s")
		}
	})
	return r.err
}

// setup is what a test sets besides the flags of a server it starts.
type setup struct {
	// env is the environment: SLUICE_* and envoyproxy/ratelimit's
	// variables. Nil is an empty one.
	env map[string]string
	// hooks change what the settings select.
	hooks hooks
}

// start runs a server with args, after flags that bind every listener to
// 127.0.0.1 ports chosen at run time (args may override them), connects a
// gRPC client to it (over its unix socket when --grpc-addr is one), and
// stops both when the test ends.
func start(t *testing.T, su setup, args ...string) *running {
	t.Helper()
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"}, args...)
	s, err := settings.Parse(args, func(k string) string { return su.env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(s, zap.NewNop(), su.hooks)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- srv.serve(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	target := srv.grpcLn.Addr().String()
	if srv.grpcLn.Addr().Network() == "unix" {
		target = "unix://" + target
	}
	if r.conn, err = grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	r.client = rlsv3.NewRateLimitServiceClient(r.conn)
	return r
}

// launch is start with args alone.
func launch(t *testing.T, args ...string) *running {
	t.Helper()
	return start(t, setup{}, args...)
}

// launchWith is launch with the store wrapped by wrap (nil: as selected).
func launchWith(t *testing.T, wrap func(limiter.Store) limiter.Store, args ...string) *running {
	t.Helper()
	return start(t, setup{hooks: hooks{wrapStore: wrap}}, args...)
}

// waitUntil checks cond every interval until it holds or within has
// passed, and reports whether it held. It is how a test here waits for a
// state of the server that nothing announces (a reload in force, a health
// status, a span ended): a poll of that state with a deadline is a
// synchronisation point, where a sleep of a guessed length is not. The
// caller fails the test with its own message.
func waitUntil(within, every time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(every) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
