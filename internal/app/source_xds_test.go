package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/xdstest"
)

// launchXDS runs Sluice with its config from srv, as Envoy Gateway's rate
// limit Deployment does: node id, client certificate and CA from pki.Dir.
func launchXDS(t *testing.T, srv *xdstest.Server, pki *xdstest.PKI, node string, args ...string) *running {
	t.Helper()
	return launch(t, append([]string{"--xds-server", srv.Addr(), "--xds-node-id", node,
		"--xds-tls-ca", filepath.Join(pki.Dir, "ca.crt"), "--xds-tls-cert", filepath.Join(pki.Dir, "tls.crt"),
		"--xds-tls-key", filepath.Join(pki.Dir, "tls.key"), "--xds-backoff-initial", "20ms", "--xds-backoff-max", "200ms",
		"--health-interval", "20ms"}, args...)...)
}

// egRequest is the request Envoy sends for call, with hits_addend n.
func egRequest(c xdstest.Call, n uint64) *rlsv3.RateLimitRequest {
	d := &rlcommon.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(n)}
	for _, e := range c.Entries {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return &rlsv3.RateLimitRequest{Domain: c.Domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
}

// decide sends call with hits_addend n and returns the code and the
// remaining count of its descriptor.
func decide(t *testing.T, client rlsv3.RateLimitServiceClient, c xdstest.Call, n uint64) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	resp, err := client.ShouldRateLimit(context.Background(), egRequest(c, n))
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", c.Entries, err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()
}

// TestXDSEnvoyGatewayConfigs serves each Envoy Gateway output the project
// keeps (a snapshot of all its resources) to a Sluice that loads its
// config over xDS with Envoy Gateway's mutual TLS, and checks that the
// calls Envoy sends for each limit are decided by that limit: its whole
// quota admitted, one more hit over the limit (admitted in shadow mode).
func TestXDSEnvoyGatewayConfigs(t *testing.T) {
	checkXDSConfigs(t, xdstest.Testdata())
}

func checkXDSConfigs(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs in %s (%v)", dir, err)
	}
	pki := xdstest.NewPKI(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			rcs, err := xdstest.ReadYAML(file)
			if err != nil {
				t.Fatal(err)
			}
			srv := xdstest.Start(t, pki)
			srv.Set(xdstest.NodeID, "1", rcs...)
			r := launchXDS(t, srv, pki, xdstest.NodeID)
			if rep := srv.WaitReply("1", 10*time.Second); !rep.ACK {
				t.Fatalf("NACK: %s", rep.ErrorDetail)
			}
			for _, rc := range rcs {
				calls, err := xdstest.Calls(rc, "user-1")
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range calls {
					quota := uint64(c.Limit.GetRequestsPerUnit())
					want := rlsv3.RateLimitResponse_OVER_LIMIT
					if c.ShadowMode {
						want = rlsv3.RateLimitResponse_OK
					}
					if code, rem := decide(t, r.client, c, quota); code != rlsv3.RateLimitResponse_OK || rem != 0 {
						t.Errorf("%s %v: %d hits = %v with %d remaining, want OK with 0", c.Domain, c.Entries, quota, code, rem)
					}
					if code, _ := decide(t, r.client, c, 1); code != want {
						t.Errorf("%s %v: one hit over %d per %v = %v, want %v", c.Domain, c.Entries, quota, c.Limit.GetUnit(), code, want)
					}
				}
			}
		})
	}
}

// TestXDSSnapshots follows Sluice through Envoy Gateway's snapshots: not
// ready before the first, a new snapshot that raises a limit (counters
// kept), a refused one (NACKed with a positioned error; the limits in
// force keep deciding), and a restart of the server (Sluice reconnects).
func TestXDSSnapshots(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki)
	r := launchXDS(t, srv, pki, xdstest.NodeID)
	if reason := r.srv.notReady(context.Background()); reason != "no config loaded" {
		t.Errorf("before any snapshot: not ready %q, want \"no config loaded\"", reason)
	}
	rcs, err := xdstest.ReadYAML(filepath.Join(xdstest.Testdata(), "multiple-masked-remote-address-match-with-same-cidr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	calls, err := xdstest.Calls(rcs[0], "")
	if err != nil || len(calls) != 2 {
		t.Fatalf("Calls = %v, %v", calls, err)
	}
	first, second := calls[0], calls[1] // 15 and 300 an hour
	srv.Set(xdstest.NodeID, "1", rcs...)
	if rep := srv.WaitReply("1", 10*time.Second); !rep.ACK {
		t.Fatalf("version 1: %+v", rep)
	}
	if code, rem := decide(t, r.client, first, 10); code != rlsv3.RateLimitResponse_OK || rem != 5 {
		t.Fatalf("10 hits on 15 an hour: %v, %d remaining; want OK, 5", code, rem)
	}
	if reason := r.srv.notReady(context.Background()); reason != "" {
		t.Errorf("after version 1: not ready %q", reason)
	}

	// Version 2 raises the first limit to 20 an hour: the 10 hits counted
	// stay counted.
	rcs[0].Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 20
	srv.Set(xdstest.NodeID, "2", rcs...)
	if rep := srv.WaitReply("2", 10*time.Second); !rep.ACK {
		t.Fatalf("version 2: %+v", rep)
	}
	if code, rem := decide(t, r.client, first, 10); code != rlsv3.RateLimitResponse_OK || rem != 0 {
		t.Errorf("10 more hits on 20 an hour: %v, %d remaining; want OK, 0 (counters kept)", code, rem)
	}
	if code, _ := decide(t, r.client, first, 1); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("hit 21 on 20 an hour: %v, want OVER_LIMIT", code)
	}

	checkXDSRefusal(t, r, srv, rcs[0], first, second)

	// Envoy Gateway restarts: empty, counting versions from 1 again.
	srv.Restart()
	srv.Set(xdstest.NodeID, "1", rcs...)
	if !srv.WaitFor(10*time.Second, func() bool {
		rs := srv.Replies()
		return len(rs) > 0 && rs[len(rs)-1].Version == "1" && rs[len(rs)-1].ACK
	}) {
		t.Fatalf("no ACK after the restart: %+v", srv.Replies())
	}
	if code, rem := decide(t, r.client, second, 1); code != rlsv3.RateLimitResponse_OK || rem != 298 {
		t.Errorf("second route after the restart: %v, %d remaining; want OK, 298", code, rem)
	}
	body := httpBody(t, "http://"+r.srv.httpLn.Addr().String()+"/metrics")
	for _, want := range []string{"sluice_xds_connected 1", `sluice_xds_config_info{version="1"} 1`, "sluice_xds_streams_total 2",
		"sluice_xds_acks_total 3", `sluice_config_loads_total{result="error"} 1`, `sluice_config_loads_total{result="ok"} 3`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// checkXDSRefusal sets version 3, rc with the second limit's unit lost:
// it is refused with a positioned error, version 2 keeps deciding, and
// /config and /rlconfig say so.
func checkXDSRefusal(t *testing.T, r *running, srv *xdstest.Server, rc *rlsconfv3.RateLimitConfig, first, second xdstest.Call) {
	t.Helper()
	bad := []*rlsconfv3.RateLimitConfig{proto.Clone(rc).(*rlsconfv3.RateLimitConfig)}
	bad[0].Descriptors[1].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set(xdstest.NodeID, "3", bad...)
	wantErr := "xds:first-listener: descriptors[1].descriptors[0].rate_limit.unit: missing unit (want second, minute, hour, day, week, month or year)"
	if rep := srv.WaitReply("3", 10*time.Second); rep.ACK || rep.ErrorDetail != wantErr || rep.RequestVersion != "2" {
		t.Fatalf("version 3: %+v, want a NACK at version 2 with %q", rep, wantErr)
	}
	if code, rem := decide(t, r.client, second, 1); code != rlsv3.RateLimitResponse_OK || rem != 299 {
		t.Errorf("second route after the refusal: %v, %d remaining; want OK, 299", code, rem)
	}
	if code, _ := decide(t, r.client, first, 1); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("first route after the refusal: %v, want OVER_LIMIT", code)
	}
	cfg := getConfig(t, r.srv)
	src, _ := cfg["source"].(map[string]any)
	if src["kind"] != "xds" || src["server"] != srv.Addr() || src["node_id"] != xdstest.NodeID || src["version"] != "2" ||
		src["refused_version"] != "3" || src["connected"] != true || fmt.Sprint(cfg["last_error"]) != "["+wantErr+"]" {
		t.Errorf("/config = %v", cfg)
	}

	dbg := ""
	for _, x := range r.srv.extra {
		if x.name == "debug-addr" {
			dbg = x.ln.Addr().String()
		}
	}
	rl := httpBody(t, "http://"+dbg+"/rlconfig")
	if !strings.Contains(rl, "first-listener.first-route_first-route.masked_remote_address_192.168.0.10/32: unit=HOUR requests_per_unit=20, shadow_mode: false") ||
		!strings.HasSuffix(rl, "# config source: xds server="+srv.Addr()+" node_id=envoy-ratelimit version=2 connected=true\n") {
		t.Errorf("/rlconfig:\n%s", rl)
	}

}

// TestXDSWrongNodeID: a node id the server has no config for gets none,
// and Sluice stays not ready, unless it may start without a config
// (FORCE_START_WITHOUT_INITIAL_CONFIG): then it answers OK for every
// domain.
func TestXDSWrongNodeID(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki)
	rcs, err := xdstest.ReadYAML(filepath.Join(xdstest.Testdata(), "month-year-rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Set(xdstest.NodeID, "1", rcs...)
	calls, _ := xdstest.Calls(rcs[0], "")
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprint("start-without-config=", force), func(t *testing.T) {
			before := len(srv.Streams())
			r := launchXDS(t, srv, pki, "ratelimit", fmt.Sprint("--start-without-config=", force))
			if !srv.WaitFor(10*time.Second, func() bool {
				for _, s := range srv.Streams()[before:] {
					if s.NodeID == "ratelimit" {
						return true
					}
				}
				return false
			}) {
				t.Fatal("no stream from node ratelimit")
			}
			// The client marks itself connected once its stream is up.
			var src map[string]any
			srv.WaitFor(10*time.Second, func() bool {
				src, _ = getConfig(t, r.srv)["source"].(map[string]any)
				return src["connected"] == true
			})
			if src["connected"] != true || src["version"] != nil {
				t.Errorf("/config source = %v, want connected, no version", src)
			}
			reason := r.srv.notReady(context.Background())
			if force {
				if code, _ := decide(t, r.client, calls[1], 2); reason != "" || code != rlsv3.RateLimitResponse_OK {
					t.Errorf("forced start: not ready %q, call %v; want ready and OK", reason, code)
				}
			} else if reason != "no config loaded" {
				t.Errorf("not ready %q, want \"no config loaded\"", reason)
			}
		})
	}
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func nopLogger() *zap.Logger { return zap.NewNop() }

// TestXDSStartRefusesBadTLSFiles: a missing certificate stops the start,
// naming the flag.
func TestXDSStartRefusesBadTLSFiles(t *testing.T) {
	s, err := settings.Parse([]string{"--xds-server", "127.0.0.1:1", "--xds-tls-cert", "/nonexistent/tls.crt", "--xds-tls-key", "/nonexistent/tls.key",
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", ""}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newServer(s, nopLogger(), hooks{}); err == nil || !strings.Contains(err.Error(), "--xds-tls-cert/--xds-tls-key") {
		t.Errorf("newServer = %v, want a --xds-tls-cert error", err)
	}
}
