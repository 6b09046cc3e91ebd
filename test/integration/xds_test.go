package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/shortval"
	"github.com/sluicehq/sluice/internal/xdstest"
)

// runEGXDS runs the binary as Envoy Gateway's rate limit Deployment runs
// it, with exactly its env (testdata/dropin's copy): its config over xDS
// from xds (for envoy-gateway:18001), its certificates from pki (for
// /certs), a real redis-server (for redis.redis.svc:6379), and free ports
// for the fixed ones. set overrides a variable of the Deployment. It
// returns the process and an Envoy-like client: TLS with a client
// certificate from the same CA.
func runEGXDS(t *testing.T, xds *xdstest.Server, pki *xdstest.PKI, redisAddr string, set map[string]string) (*sluice, rlsv3.RateLimitServiceClient) {
	t.Helper()
	c := loadDeployment(t, "envoy-gateway-ratelimit-deployment.yaml")
	s, names := runAsDeployment(t, c, func(name, v string) string {
		if x, ok := set[name]; ok {
			return x
		}
		switch name {
		case "CONFIG_GRPC_XDS_SERVER_URL":
			return xds.Addr() // for envoy-gateway:18001
		case "REDIS_URL":
			return redisAddr
		case "PROMETHEUS_ADDR":
			return "127.0.0.1:0" // for :19001
		}
		return strings.Replace(v, "/certs", pki.Dir, 1)
	}, "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0")
	checkEveryVarRead(t, s, names)
	conn, err := grpc.NewClient(loopback(t, s.GRPCAddr), grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn)
}

// egCall sends the descriptor Envoy sends for c with hits_addend n and
// returns the code and the remaining count.
func egCall(t *testing.T, client rlsv3.RateLimitServiceClient, c xdstest.Call, n uint64) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	d := &rlcommon.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(n)}
	for _, e := range c.Entries {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: c.Domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s %v): %v", c.Domain, c.Entries, err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining()
}

// TestEnvoyGatewayXDS runs Sluice with exactly the env of Envoy Gateway's
// rate limit Deployment (CONFIG_TYPE=GRPC_XDS_SOTW, its TLS settings,
// FORCE_START_WITHOUT_INITIAL_CONFIG) against an in-process
// go-control-plane server set up as Envoy Gateway's (SnapshotCache, ADS,
// TLS 1.3, client certificates required) and a real Redis: ready before
// the first snapshot; Envoy Gateway's configs ACKed and deciding through
// Redis; a new snapshot changing a limit with the counters kept; a refused
// snapshot NACKed with a positioned error while the limits in force keep
// deciding; Envoy Gateway restarting and Sluice reconnecting.
func TestEnvoyGatewayXDS(t *testing.T) {
	pki := xdstest.NewPKI(t)
	xds := xdstest.Start(t, pki)
	redisSrv := redistest.Start(t)
	s, client := runEGXDS(t, xds, pki, redisSrv.Addr(), nil)
	health := "http://" + loopback(t, s.HTTPAddr) + "/healthcheck"
	if code, body := httpGet(t, health); code != 200 || body != "OK" {
		t.Errorf("before any snapshot (FORCE_START_WITHOUT_INITIAL_CONFIG): /healthcheck %d %q, want 200 OK", code, body)
	}
	if !xds.WaitFor(10*time.Second, func() bool { st := xds.Streams(); return len(st) == 1 && st[0].NodeID == xdstest.NodeID }) {
		t.Fatalf("no stream from node %s: %+v\n%s", xdstest.NodeID, xds.Streams(), s.Log())
	}

	rcs := append(readEG(t, "multiple-shared-and-unshared.yaml"), readEG(t, "multiple-masked-remote-address-match-with-same-cidr.yaml")[0])
	rcs[2].Name, rcs[2].Domain = "second-listener", "second-listener"
	xds.Set(xdstest.NodeID, "1", rcs...)
	if r := xds.WaitReply("1", 10*time.Second); !r.ACK {
		t.Fatalf("version 1: %+v\n%s", r, s.Log())
	}
	checkFivePerSecond(t, client, rcs[:2])
	if n, err := redistest.Do(redisSrv.Addr(), "DBSIZE"); err != nil || n.(int64) < 4 {
		t.Errorf("Redis holds %v keys (%v), want the counters", n, err)
	}

	hourly, _ := xdstest.Calls(rcs[2], "") // 15 and 300 an hour
	if code, rem := egCall(t, client, hourly[0], 10); code != rlsv3.RateLimitResponse_OK || rem != 5 {
		t.Fatalf("10 hits on 15 an hour: %v, %d", code, rem)
	}
	rcs[2].Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 20
	xds.Set(xdstest.NodeID, "2", rcs...)
	if r := xds.WaitReply("2", 10*time.Second); !r.ACK {
		t.Fatalf("version 2: %+v", r)
	}
	if code, rem := egCall(t, client, hourly[0], 10); code != rlsv3.RateLimitResponse_OK || rem != 0 {
		t.Errorf("10 more hits on 20 an hour: %v, %d remaining; want OK, 0 (counters kept)", code, rem)
	}

	bad := proto.Clone(rcs[2]).(*rlsconfv3.RateLimitConfig)
	bad.Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 1000
	bad.Descriptors[1].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	xds.Set(xdstest.NodeID, "3", rcs[0], rcs[1], bad)
	want := "xds:second-listener: descriptors[1].descriptors[0].rate_limit.unit: missing unit (want second, minute, hour, day, week, month or year)"
	if r := xds.WaitReply("3", 10*time.Second); r.ACK || r.ErrorDetail != want || r.RequestVersion != "2" {
		t.Fatalf("version 3: %+v, want a NACK at version 2 with %q", r, want)
	}
	if code, _ := egCall(t, client, hourly[0], 1); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the refusal: hit 21 on 20 an hour = %v, want OVER_LIMIT (version 2 in force)", code)
	}
	if !strings.Contains(s.Log(), want) {
		t.Errorf("the refusal is not logged:\n%s", s.Log())
	}

	xds.Restart()
	xds.Set(xdstest.NodeID, "1", rcs...)
	if !xds.WaitFor(15*time.Second, func() bool {
		rs := xds.Replies()
		return len(rs) > 0 && rs[len(rs)-1].Version == "1" && rs[len(rs)-1].ACK
	}) {
		t.Fatalf("no ACK after Envoy Gateway restarted: %+v\n%s", xds.Replies(), s.Log())
	}
	if code, rem := egCall(t, client, hourly[1], 1); code != rlsv3.RateLimitResponse_OK || rem != 299 {
		t.Errorf("after the restart: %v, %d remaining; want OK, 299", code, rem)
	}
	_, metrics := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/metrics")
	for _, m := range []string{"sluice_xds_connected 1", `sluice_xds_config_info{version="1"} 1`, "sluice_xds_streams_total 2", "sluice_xds_acks_total 3"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}

// TestEnvoyGatewayXDSWrongNodeID: with a node id Envoy Gateway serves no
// config to, and without FORCE_START_WITHOUT_INITIAL_CONFIG, Sluice gets
// no config and stays not ready.
func TestEnvoyGatewayXDSWrongNodeID(t *testing.T) {
	pki := xdstest.NewPKI(t)
	xds := xdstest.Start(t, pki)
	xds.Set(xdstest.NodeID, "1", readEG(t, "month-year-rule.yaml")...)
	s, client := runEGXDS(t, xds, pki, redistest.Start(t).Addr(),
		map[string]string{"CONFIG_GRPC_XDS_NODE_ID": "ratelimit", "FORCE_START_WITHOUT_INITIAL_CONFIG": "false"})
	if !xds.WaitFor(10*time.Second, func() bool { st := xds.Streams(); return len(st) == 1 && st[0].NodeID == "ratelimit" }) {
		t.Fatalf("no stream from node ratelimit: %+v\n%s", xds.Streams(), s.Log())
	}
	time.Sleep(200 * time.Millisecond)
	if code, body := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/readyz"); code != 503 || !strings.Contains(body, "no config loaded") {
		t.Errorf("/readyz = %d %q, want 503 no config loaded", code, body)
	}
	if xds.Responses("1") != 0 {
		t.Errorf("the server sent node ratelimit a config")
	}
	calls, _ := xdstest.Calls(readEG(t, "month-year-rule.yaml")[0], "")
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range calls[0].Entries {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if _, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "first-listener",
		Descriptors: []*rlcommon.RateLimitDescriptor{d}}); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Errorf("a call without a config: %v, want UNAVAILABLE", err)
	}
}

// checkFivePerSecond checks each limit of rcs, all 5 a second: 5 hits
// admitted, the sixth over the limit.
func checkFivePerSecond(t *testing.T, client rlsv3.RateLimitServiceClient, rcs []*rlsconfv3.RateLimitConfig) {
	t.Helper()
	for _, rc := range rcs {
		calls, err := xdstest.Calls(rc, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			if code, rem := egCall(t, client, c, 5); code != rlsv3.RateLimitResponse_OK || rem != 0 {
				t.Errorf("%s %v: 5 hits = %v, %d remaining; want OK, 0", c.Domain, c.Entries, code, rem)
			}
			if code, _ := egCall(t, client, c, 1); code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%s %v: hit 6 = %v, want OVER_LIMIT", c.Domain, c.Entries, code)
			}
		}
	}
}

func readEG(t *testing.T, name string) []*rlsconfv3.RateLimitConfig {
	t.Helper()
	rcs, err := xdstest.ReadYAML(filepath.Join(xdstest.Testdata(), name))
	if err != nil {
		t.Fatal(err)
	}
	return rcs
}

// TestXDSLongVersionInfo: a 3 MB version_info is ACKed with the whole
// version (the protocol's), but where Sluice shows it (the
// sluice_xds_config_info label, /config, /ui/api, every log line) it is
// at most 64 bytes: its start, "…#" and a hash of the whole.
func TestXDSLongVersionInfo(t *testing.T) {
	pki := xdstest.NewPKI(t)
	xds := xdstest.Start(t, pki)
	s, client := runEGXDS(t, xds, pki, redistest.Start(t).Addr(), nil)
	if !xds.WaitFor(10*time.Second, func() bool { return len(xds.Streams()) == 1 }) {
		t.Fatalf("no stream: %+v\n%s", xds.Streams(), s.Log())
	}
	version := "v7-" + strings.Repeat("x", 3<<20)
	rcs := readEG(t, "multiple-shared-and-unshared.yaml")
	xds.Set(xdstest.NodeID, version, rcs...)
	if r := xds.WaitReply(version, 10*time.Second); !r.ACK || r.RequestVersion != version {
		t.Fatalf("ACK of the 3 MB version: ACK %v, version of %d bytes; want the whole version ACKed\n%.2000s", r.ACK, len(r.RequestVersion), s.Log())
	}
	checkFivePerSecond(t, client, rcs)
	short := string(shortval.Append(nil, version, 64))
	base := "http://" + loopback(t, s.HTTPAddr)
	_, metrics := httpGet(t, base+"/metrics")
	if want := `sluice_xds_config_info{version="` + short + `"} 1`; !strings.Contains(metrics, want) || len(metrics) > 1<<20 {
		t.Errorf("/metrics (%d bytes) lacks %q", len(metrics), want)
	}
	var cfg struct {
		Source struct {
			Version string `json:"version"`
		} `json:"source"`
	}
	_, body := httpGet(t, base+"/config")
	if err := json.Unmarshal([]byte(body), &cfg); err != nil || cfg.Source.Version != short {
		t.Errorf("/config source.version = %.100q (%v), want %q", cfg.Source.Version, err, short)
	}
	if _, ui := httpGet(t, base+"/ui/api"); len(ui) > 1<<20 || !strings.Contains(ui, short) {
		t.Errorf("/ui/api is %d bytes, want it to show %q", len(ui), short)
	}
	for _, line := range strings.Split(s.Log(), "\n") {
		if len(line) > 4096 {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
	if !strings.Contains(s.Log(), short) {
		t.Errorf("no log line names the version as %q:\n%s", short, s.Log())
	}
}
