package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHealthcheck: /healthcheck answers 200 "OK" as envoyproxy/ratelimit's
// does, and 500 while what --healthcheck-requires names is missing, and
// until Redis has first answered (the peer does not start without it); a
// later outage of the store does not fail it unless required (it is a
// liveness probe in the peer's deployments: test/integration's
// TestPeerHealthcheckWaitsForStore).
func TestHealthcheck(t *testing.T) {
	dead := "redis://127.0.0.1:1/0"
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
	}{
		{"healthy", []string{"--config", "../../config"}, 200},
		{"store never answered, not required", []string{"--config", "../../config", "--redis-url", dead}, 500},
		{"store down, required", []string{"--config", "../../config", "--redis-url", dead, "--healthcheck-requires", "STORE", "--health-interval", "10ms"}, 500},
		{"no config, not required", []string{"--config", t.TempDir()}, 200},
		{"no config, required", []string{"--config", t.TempDir(), "--healthcheck-requires", "config"}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := launch(t, tc.args...)
			url := "http://" + r.srv.httpLn.Addr().String() + "/healthcheck"
			var code int
			var body string
			waitUntil(5*time.Second, 20*time.Millisecond, func() bool {
				code, body = get(t, url)
				return code == tc.wantCode
			})
			if code != tc.wantCode || (code == 200 && body != "OK") {
				t.Errorf("/healthcheck = %d %q, want %d", code, body, tc.wantCode)
			}
		})
	}
}

// TestDebugListener: /rlconfig prints the config as envoyproxy/ratelimit
// does, and pprof answers, on --debug-addr.
func TestDebugListener(t *testing.T) {
	r := launch(t, "--config", "../../config")
	var addr string
	for _, x := range r.srv.extra {
		if x.name == "debug-addr" {
			addr = x.ln.Addr().String()
		}
	}
	code, body := get(t, "http://"+addr+"/rlconfig")
	if code != 200 || !strings.Contains(body, "edge.api_key: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false\n") {
		t.Errorf("/rlconfig = %d:\n%s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ = %d", code)
	}
	if code, body := get(t, "http://"+addr+"/"); code != 200 || !strings.Contains(body, "/rlconfig: ") {
		t.Errorf("/ = %d %q", code, body)
	}
}

func TestWriteRLConfig(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "c.yaml", Data: []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: b
        value: x
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: whitelist
  - key: layered
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5, algorithm: token_bucket, burst: 8}
`)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeRLConfig(&b, cfg)
	want := "d.a: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"d.a.b_x: unit=HOUR requests_per_unit=0, shadow_mode: true, quota_mode: false\n" +
		"d.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"d.layered[burst]: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"d.layered[layered/1m]: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false\n" +
		"d.bucket: unit=SECOND requests_per_unit=5 unit_multiplier=10 algorithm=token_bucket burst=8, shadow_mode: false, quota_mode: false\n"
	if b.String() != want {
		t.Errorf("writeRLConfig:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestCompatMetricsListener: --compat-metrics adds envoyproxy/ratelimit's
// names, served on --metrics-addr at --metrics-path as on /metrics.
func TestCompatMetricsListener(t *testing.T) {
	r := launch(t, "--config", "../../config", "--compat-metrics", "--metrics-addr", "127.0.0.1:0", "--metrics-path", "/m")
	for range 3 {
		if _, err := r.client.ShouldRateLimit(context.Background(), edgeRequest([]string{"remote_address", "198.51.100.9"})); err != nil {
			t.Fatal(err)
		}
	}
	var addr string
	for _, x := range r.srv.extra {
		if x.name == "metrics-addr" {
			addr = x.ln.Addr().String()
		}
	}
	code, body := get(t, "http://"+addr+"/m")
	for _, want := range []string{`ratelimit_service_rate_limit_total_hits{domain="edge",key1="remote_address"} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="remote_address"} 3`, "sluice_store_calls_total"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET /m = %d, lacks %q", code, want)
		}
	}
	if code, _ := get(t, "http://"+addr+"/metrics"); code != 404 {
		t.Errorf("GET /metrics on --metrics-addr = %d, want 404 (the path is /m)", code)
	}
}

// TestGRPCUnixSocket: --grpc-addr unix:PATH (envoyproxy/ratelimit's
// GRPC_UDS) serves on a unix socket.
func TestGRPCUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rl.sock")
	r := launch(t, "--config", "../../config", "--grpc-addr", "unix:"+sock, "--debug-addr", "")
	if got := r.srv.grpcLn.Addr().String(); got != sock {
		t.Fatalf("gRPC listens on %q, want the unix socket %q", got, sock)
	}
	resp, err := r.client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "uds"}))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit over the unix socket = %v, %v", resp.GetOverallCode(), err)
	}
}

// TestGRPCClientAuthIfGiven: with --grpc-client-auth=if-given (Envoy
// Gateway's GRPC_SERVER_TLS_CA_CERT) a client without a certificate is
// served, and a certificate that is sent must chain to the CA and, with
// --grpc-client-san, name that host.
func TestGRPCClientAuthIfGiven(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	for _, tc := range []struct {
		san   string
		certs []tls.Certificate
		ok    bool
	}{
		{"", nil, true},
		{"", []tls.Certificate{p.clientCert}, true},
		{"", []tls.Certificate{other.clientCert}, false},
		{"127.0.0.1", []tls.Certificate{p.clientCert}, true},
		{"envoy.example", []tls.Certificate{p.clientCert}, false},
	} {
		args := []string{"--grpc-tls-cert", p.serverCert, "--grpc-tls-key", p.serverKey, "--grpc-client-ca", p.caFile, "--grpc-client-auth", "IF-GIVEN"}
		if tc.san != "" {
			args = append(args, "--grpc-client-san", tc.san)
		}
		srv, _, _ := startServer(t, args...)
		creds := credentials.NewTLS(&tls.Config{RootCAs: p.caPool, Certificates: tc.certs, MinVersion: tls.VersionTLS12})
		conn, err := grpc.NewClient(srv.grpcLn.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, edgeRequest([]string{"api_key", "tls"}))
		cancel()
		conn.Close()
		if (err == nil) != tc.ok {
			t.Errorf("san %q, %d client certificates: error %v, want ok=%v", tc.san, len(tc.certs), err, tc.ok)
		}
	}
}

// TestGRPCCertReload: a new certificate in the same files is served to new
// connections without a restart.
func TestGRPCCertReload(t *testing.T) {
	p := newPKI(t)
	r, err := newCertReloader(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.getCertificate(nil)
	q := newPKI(t)
	for _, f := range [][2]string{{q.serverCert, p.serverCert}, {q.serverKey, p.serverKey}} {
		data, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], data, 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute)
		os.Chtimes(f[1], later, later)
	}
	second, _ := r.getCertificate(nil)
	if bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Error("the certificate was not read again after its files changed")
	}
}

// TestCLI: help and version as subcommands and flags, help on stdout,
// check --help.
func TestCLI(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		wantStdout string
	}{
		{[]string{"--help"}, 0, "usage: sluice [flags]"},
		{[]string{"help"}, 0, "  -redis-url string"},
		{[]string{"version"}, 0, "sluice "},
		{[]string{"--version"}, 0, "sluice "},
		{[]string{"check", "--help"}, 0, "usage: sluice check PATH..."},
		{[]string{"check", "-h"}, 0, "file:line:col"},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tc.args, nil, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String(), tc.wantStdout) {
			t.Errorf("sluice %v = %d, stdout %q, stderr %q: want %d and %q on stdout", tc.args, code, out.String(), errOut.String(), tc.code, tc.wantStdout)
		}
	}
}

// TestConfigTree: with --config-tree (envoyproxy/ratelimit's runtime
// layout) every file below the directory loads, whatever its extension, a
// change in a subdirectory reloads, and dotfiles load only with
// --config-dotfiles; /config shows the version.
func TestConfigTree(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "team", "a")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "limits.conf"), limitConfig(5))
	write(t, filepath.Join(dir, ".other"), "domain: dotted\n")
	r := launch(t, "--config", dir, "--config-tree", "--reload-debounce", "50ms")
	eventually(t, r.client, 5, "a .conf file two levels down")
	write(t, filepath.Join(sub, "limits.conf"), limitConfig(6))
	eventually(t, r.client, 6, "an edit in a subdirectory")
	cfg := getConfig(t, r.srv)
	if files, _ := cfg["files"].([]any); len(files) != 1 || cfg["version"] == "" || cfg["version"] == nil {
		t.Errorf("/config = %v, want one file (the dotfile skipped) and a version", cfg)
	}
	r2 := launch(t, "--config", dir, "--config-tree", "--config-dotfiles")
	if files, _ := getConfig(t, r2.srv)["files"].([]any); len(files) != 2 {
		t.Errorf("with --config-dotfiles: files %v, want the dotfile too", files)
	}
}

// TestRedactArgs: /debug/pprof/cmdline shows no secret given by flag: a
// URL's password and the whole value of a secret setting are replaced,
// every other argument is kept as it is.
func TestRedactArgs(t *testing.T) {
	got := redactArgs([]string{"/bin/sluice", "--redis-url", "redis://:s3cret@h:6379/0", "-redis-url=rediss://u:s3cret@h:1",
		"--redis-sentinel-auth", "s3cret", "--redis-sentinel-auth=u:s3cret", "--xds-headers=authorization:s3cret", "-xds-headers", "k:s3cret",
		"--config", "dir with space", "--redis-cluster-addrs=a:1,b:2", "--log-level=info"})
	want := []string{"/bin/sluice", "--redis-url", "redis://:xxxxx@h:6379/0", "-redis-url=rediss://u:xxxxx@h:1",
		"--redis-sentinel-auth", "(set)", "--redis-sentinel-auth=(set)", "--xds-headers=(set)", "-xds-headers", "(set)",
		"--config", "dir with space", "--redis-cluster-addrs=a:1,b:2", "--log-level=info"}
	if !slices.Equal(got, want) {
		t.Errorf("redactArgs =\n%q\nwant\n%q", got, want)
	}
}
