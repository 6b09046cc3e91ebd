package xdsconfig_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/xdstest"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// outcomes records what a Client delivers.
type outcomes struct {
	mu   sync.Mutex
	cfgs []*descriptors.Config
	errs []error
	ch   chan struct{}
}

func newOutcomes() *outcomes { return &outcomes{ch: make(chan struct{}, 100)} }

func (o *outcomes) deliver(cfg *descriptors.Config, err error) {
	o.mu.Lock()
	o.cfgs = append(o.cfgs, cfg)
	o.errs = append(o.errs, err)
	o.mu.Unlock()
	o.ch <- struct{}{}
}

// next waits for the next outcome.
func (o *outcomes) next(t *testing.T) (*descriptors.Config, error) {
	t.Helper()
	select {
	case <-o.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no config delivered within 10s")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cfgs[len(o.cfgs)-1], o.errs[len(o.errs)-1]
}

func (o *outcomes) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.cfgs)
}

// startClient runs a Client for node against srv until the test ends.
func startClient(t *testing.T, srv *xdstest.Server, pki *xdstest.PKI, node string, reg prometheus.Registerer, o *outcomes) *xdsconfig.Client {
	t.Helper()
	m, err := xdsconfig.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := structpb.NewStruct(map[string]any{"cluster": "envoy-gateway-system"})
	c, err := xdsconfig.New(xdsconfig.Options{
		Server:   srv.Addr(),
		Node:     &corev3.Node{Id: node, Metadata: meta},
		Headers:  map[string]string{"x-tenant": "blue"},
		TLS:      func() (*tls.Config, error) { return pki.ClientTLS(), nil },
		Backoff:  xdsconfig.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.5},
		NackHold: 300 * time.Millisecond,
		Metrics:  m,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, o.deliver) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return c
}

func egConfigs(t *testing.T, file string) []*rlsconfv3.RateLimitConfig {
	t.Helper()
	rcs, err := xdstest.ReadYAML(filepath.Join(xdstest.Testdata(), file))
	if err != nil {
		t.Fatal(err)
	}
	return rcs
}

// TestClientLifecycle walks a subscription through Envoy Gateway's
// server: ACK, a new snapshot, a refused snapshot that the server sends
// again and again, a fixed one, and a server restart.
func TestClientLifecycle(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki)
	reg := prometheus.NewRegistry()
	o := newOutcomes()
	srv.Set(xdstest.NodeID, "1", egConfigs(t, "multiple-shared-and-unshared.yaml")...)
	c := startClient(t, srv, pki, xdstest.NodeID, reg, o)

	cfg, err := o.next(t)
	if err != nil || len(cfg.Domains()) != 2 {
		t.Fatalf("first config = %v, %v; want the two domains", cfg, err)
	}
	if r := srv.WaitReply("1", 5*time.Second); !r.ACK {
		t.Fatalf("version 1: %+v, want an ACK", r)
	}
	st := srv.Streams()[0]
	if st.NodeID != xdstest.NodeID || st.NodeMetadata["cluster"] != "envoy-gateway-system" || strings.Join(st.Headers.Get("x-tenant"), ",") != "blue" {
		t.Errorf("stream = %+v, want the node id, its metadata and the x-tenant header", st)
	}
	if s := c.Status(); !s.Connected || s.Version != "1" || s.NodeID != xdstest.NodeID || s.Server != srv.Addr() {
		t.Errorf("Status = %+v", s)
	}

	checkRefusal(t, srv, c, o)

	// A fixed snapshot is taken within the hold.
	srv.Set(xdstest.NodeID, "3", egConfigs(t, "month-year-rule.yaml")...)
	if cfg, err := o.next(t); err != nil || cfg.Domain("first-listener") == nil {
		t.Fatalf("config 3 = %v, %v", cfg, err)
	}
	if r := srv.WaitReply("3", 5*time.Second); !r.ACK {
		t.Fatalf("version 3: %+v, want an ACK", r)
	}
	checkMetrics(t, reg, map[string]float64{"sluice_xds_connected": 1, `sluice_xds_config_info{version="3"}`: 1})
	got := metrics(t, reg)
	if n := got["sluice_xds_acks_total"]; n != 2 {
		t.Errorf("acks = %v, want 2", n)
	}
	nacks, resends := got["sluice_xds_nacks_total"], got["sluice_xds_refused_resends_total"]
	if nacks < 2 || resends != nacks-1 {
		t.Errorf("nacks = %v, refused re-sends = %v; want every NACK but the first to be a re-send", nacks, resends)
	}

	checkRestart(t, srv, c, o)
}

// checkRefusal sets a snapshot that does not build: it is NACKed with
// positioned errors and delivered once, and the server's re-sends are
// refused again without a new delivery.
func checkRefusal(t *testing.T, srv *xdstest.Server, c *xdsconfig.Client, o *outcomes) {
	t.Helper()
	bad := egConfigs(t, "month-year-rule.yaml")
	bad[0].Descriptors[1].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(xdstest.NodeID, "2", bad...)
	if _, err := o.next(t); err == nil || !strings.Contains(err.Error(), "xds:first-listener: descriptors[1].descriptors[0].rate_limit.unit: missing unit") {
		t.Fatalf("refused config error = %v", err)
	}
	r := srv.WaitReply("2", 5*time.Second)
	if r.ACK || r.RequestVersion != "1" || !strings.HasPrefix(r.ErrorDetail, "xds:first-listener: descriptors[1].descriptors[0].rate_limit.unit: missing unit") {
		t.Fatalf("version 2: %+v, want a NACK at version 1 with the positioned error", r)
	}
	time.Sleep(time.Second) // the server re-sends version 2 at each NACK
	sent := srv.Responses("2")
	if sent < 2 || sent > 6 {
		t.Errorf("version 2 sent %d times in 1s, want 2 to 6 (one NACK per 300ms hold)", sent)
	}
	if n := o.count(); n != 2 {
		t.Errorf("%d outcomes delivered, want 2 (the re-sends are not built again)", n)
	}
	if s := c.Status(); s.Version != "1" || s.RefusedVersion != "2" {
		t.Errorf("Status = %+v, want version 1 in force, 2 refused", s)
	}

}

// checkRestart restarts the server, which comes back empty and counts from
// 1 again: the client reconnects, and the same content under version 1 is
// ACKed without a new delivery; new content is delivered.
func checkRestart(t *testing.T, srv *xdstest.Server, c *xdsconfig.Client, o *outcomes) {
	t.Helper()
	srv.Restart()
	srv.Set(xdstest.NodeID, "1", egConfigs(t, "month-year-rule.yaml")...)
	if !srv.WaitFor(10*time.Second, func() bool {
		rs := srv.Replies()
		return len(rs) > 0 && rs[len(rs)-1].Version == "1" && rs[len(rs)-1].ACK
	}) {
		t.Fatalf("no ACK of version 1 after the restart; replies %+v", srv.Replies())
	}
	if n := len(srv.Streams()); n != 2 {
		t.Errorf("%d streams, want 2", n)
	}
	if s := c.Status(); !s.Connected || s.Version != "1" {
		t.Errorf("Status after restart = %+v", s)
	}
	if n := o.count(); n != 3 {
		t.Errorf("%d outcomes delivered, want 3 (the same content after a restart is not delivered again)", n)
	}
	srv.Set(xdstest.NodeID, "2", egConfigs(t, "distinct-remote-address-match.yaml")...)
	if cfg, err := o.next(t); err != nil || cfg.Match("first-listener", []descriptors.Entry{{Key: "first-route", Value: "first-route"},
		{Key: "masked_remote_address", Value: "192.168.0.0/16"}, {Key: "remote_address", Value: "192.168.0.5"}}) == nil {
		t.Errorf("config after restart = %v, %v", cfg, err)
	}
}

// TestClientWrongNode: a node id the server has no snapshot for gets no
// config; the stream stays open.
func TestClientWrongNode(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki)
	srv.Set(xdstest.NodeID, "1", egConfigs(t, "month-year-rule.yaml")...)
	o := newOutcomes()
	c := startClient(t, srv, pki, "not-"+xdstest.NodeID, prometheus.NewRegistry(), o)
	if !srv.WaitFor(5*time.Second, func() bool { return len(srv.Streams()) == 1 && srv.Streams()[0].NodeID != "" }) {
		t.Fatal("no stream")
	}
	time.Sleep(300 * time.Millisecond)
	if n, s := o.count(), c.Status(); n != 0 || !s.Connected || s.Version != "" || srv.Responses("1") != 0 {
		t.Errorf("%d outcomes, Status %+v, %d responses; want none, connected without a version", n, s, srv.Responses("1"))
	}
}

// TestClientNoClientCertificate: Envoy Gateway's server requires a client
// certificate; without one no stream works, and the client keeps trying.
func TestClientNoClientCertificate(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki)
	srv.Set(xdstest.NodeID, "1", egConfigs(t, "month-year-rule.yaml")...)
	c, err := xdsconfig.New(xdsconfig.Options{Server: srv.Addr(), Node: &corev3.Node{Id: xdstest.NodeID},
		TLS:     func() (*tls.Config, error) { return &tls.Config{RootCAs: pki.Pool}, nil },
		Backoff: xdsconfig.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	o := newOutcomes()
	if err := c.Run(ctx, o.deliver); err != nil {
		t.Fatal(err)
	}
	if n := o.count(); n != 0 || srv.Responses("1") != 0 {
		t.Errorf("%d outcomes, %d responses; want none without a client certificate", n, srv.Responses("1"))
	}
}

func TestNewRefuses(t *testing.T) {
	for _, opts := range []xdsconfig.Options{{Node: &corev3.Node{Id: "n"}}, {Server: "x:1"}, {Server: "x:1", Node: &corev3.Node{}}} {
		if _, err := xdsconfig.New(opts); err == nil {
			t.Errorf("New(%+v) = nil error", opts)
		}
	}
}

// checkMetrics compares the series of reg with want.
func checkMetrics(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	got := metrics(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("metric %s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// metrics returns the value of every series of reg, by name{labels}.
func metrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return got
}
