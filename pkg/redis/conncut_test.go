package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// cutProxy forwards TCP connections to a Redis and can cut all of them at
// once, in the middle of whatever they carry.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cuts   atomic.Int64
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
		go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
	}
}

// cut closes every connection it forwards.
func (p *cutProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.cuts.Add(1)
}

// TestConnectionCutCountsNoHitTwice cuts the connections to Redis every few
// milliseconds while 64 callers' decisions share pipelined script calls.
// Every request has a counter of its own (one hit), so a call sent twice
// would show as a counter of 2: every counter must hold 1 when its request
// was admitted, 0 or 1 when it failed (a call cut after Redis ran it), and
// never more.
func TestConnectionCutCountsNoHitTwice(t *testing.T) {
	srv := redistest.Start(t)
	proxy := newCutProxy(t, srv.Addr())
	prefix := redistest.Prefix(t.Name())
	s := New(newClient(t, proxy.ln.Addr().String()), Options{Prefix: prefix, CallTimeout: time.Second, LeaseRate: -1})
	defer s.Close()
	lim := limiter.Limit{Requests: 10, Window: time.Minute, SubWindows: 1}
	var next, admitted, failed atomic.Int64
	outcome := make([]int8, 200000) // 1 admitted, -1 failed
	calls0 := scriptCalls(t, srv.Addr())
	var wg sync.WaitGroup
	end := time.Now().Add(1500 * time.Millisecond)
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := next.Add(1) - 1
				if int(i) >= len(outcome) {
					return
				}
				res, err := s.Apply(context.Background(), []limiter.Hit{{Key: fmt.Sprint(i), Limit: lim, Hits: 1}})
				switch {
				case err != nil && errors.Is(err, limiter.ErrStoreUnavailable):
					outcome[i] = -1
					failed.Add(1)
				case err != nil:
					t.Errorf("request %d: %v", i, err)
				case res[0].Allowed:
					outcome[i] = 1
					admitted.Add(1)
				default:
					t.Errorf("request %d denied on a counter of its own", i)
				}
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(end) {
			time.Sleep(7 * time.Millisecond)
			proxy.cut()
		}
	})
	wg.Wait()
	calls := scriptCalls(t, srv.Addr()) - calls0
	c := newClient(t, srv.Addr())
	n := min(next.Load(), int64(len(outcome)))
	var ranThenFailed int
	for i := range n {
		_, cur, prev, _ := readCounter(t, c, counterKey(cleanPrefix(prefix), limiter.Hit{Key: fmt.Sprint(i), Limit: lim}))
		got := cur + prev
		switch {
		case got > 1:
			t.Errorf("request %d: counter %d: a hit counted twice", i, got)
		case outcome[i] == 1 && got != 1:
			t.Errorf("request %d admitted, counter %d, want 1", i, got)
		case outcome[i] == -1 && got == 1:
			ranThenFailed++
		}
	}
	t.Logf("%d requests in %d script calls over %d cuts: %d admitted, %d failed (%d of them ran before the cut)",
		n, calls, proxy.cuts.Load(), admitted.Load(), failed.Load(), ranThenFailed)
	if int64(calls) >= n {
		t.Errorf("%d script calls for %d requests: the decisions did not share calls", calls, n)
	}
	if failed.Load() == 0 || admitted.Load() == 0 {
		t.Errorf("%d admitted, %d failed: the cuts did not land in the middle of the load", admitted.Load(), failed.Load())
	}
}
