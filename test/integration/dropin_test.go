package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The drop-in tests run the built binary the way envoyproxy/ratelimit's
// deployments run theirs: as /bin/ratelimit, with exactly the env of the
// Deployment (testdata/dropin, copies of Istio's sample and of Envoy
// Gateway's), nothing inherited. Only what cannot be the same here is
// replaced, each by its counterpart: host names by a real redis-server's
// address, the mounted directories (/data, /certs) by directories laid out
// the same way, and fixed ports by free ones (PORT, GRPC_PORT and
// DEBUG_PORT, which the Deployments leave at their defaults, are set to 0;
// PROMETHEUS_ADDR's port too).

// deployment is the part of a Deployment these tests read.
type deployment struct {
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Command []string `yaml:"command"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		ContainerPort int `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	VolumeMounts []struct {
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func loadDeployment(t *testing.T, name string) container {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dropin", name))
	if err != nil {
		t.Fatal(err)
	}
	var d deployment
	if err := yaml.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container", name)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// runAsDeployment starts the binary as c's command (argv[0] /bin/ratelimit,
// a symlink to the built binary) with c's env, each value passed through
// replace, plus extra. No other variable is set.
func runAsDeployment(t *testing.T, c container, replace func(name, value string) string, extra ...string) (*sluice, []string) {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	return runAsDeploymentFrom(t, link, c, replace, extra...)
}

// runAsDeploymentFrom is runAsDeployment with exe (a binary, or a link to
// one) as the file that c's command names.
func runAsDeploymentFrom(t *testing.T, exe string, c container, replace func(name, value string) string, extra ...string) (*sluice, []string) {
	t.Helper()
	if len(c.Command) != 1 || c.Command[0] != "/bin/ratelimit" {
		t.Fatalf("command %q, want [/bin/ratelimit]", c.Command)
	}
	cmd := exec.Command(exe)
	cmd.Args[0] = c.Command[0]
	var names []string
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+replace(e.Name, e.Value))
		names = append(names, e.Name)
	}
	cmd.Env = append(cmd.Env, extra...)
	cmd.Dir = t.TempDir()
	return startCmd(t, cmd), names
}

// loopback is addr ("[::]:8080", ":8080") with its host replaced by
// 127.0.0.1, for a client.
func loopback(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// startupSettings returns the settings named in the start-up log lines
// about envoyproxy/ratelimit's variables: what was applied and what was
// not. It fails t if the warning takes more than one line.
func startupSettings(t *testing.T, s *sluice) (applied, warned []string) {
	t.Helper()
	for _, line := range strings.Split(s.Log(), "\n") {
		var l struct {
			Msg      string   `json:"msg"`
			Settings []string `json:"settings"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Msg == "envoyproxy/ratelimit settings applied":
			applied = append(applied, l.Settings...)
		case strings.HasPrefix(l.Msg, "envoyproxy/ratelimit settings that Sluice does not apply"):
			if warned != nil {
				t.Errorf("more than one start-up warning line about envoyproxy/ratelimit settings")
			}
			warned = append([]string{}, l.Settings...)
		}
	}
	return applied, warned
}

// checkEveryVarRead fails t for a variable of names that neither start-up
// line mentions.
func checkEveryVarRead(t *testing.T, s *sluice, names []string) {
	t.Helper()
	applied, warned := startupSettings(t, s)
	all := strings.Join(append(applied, warned...), "\n")
	for _, n := range names {
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(all) {
			t.Errorf("%s is set by the Deployment but neither applied nor warned about:\napplied: %q\nwarned: %q", n, applied, warned)
		}
	}
}

// configMapMount lays out dir as Kubernetes mounts a ConfigMap: every key a
// symlink through ..data into a timestamped directory.
func configMapMount(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestIstioSampleDeployment runs Sluice with exactly the env of Istio's
// sample rate limit Deployment and its ConfigMap mount, against a real
// redis-server.
func TestIstioSampleDeployment(t *testing.T) {
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	runIstioSample(t, link)
}

// runIstioSample runs exe as TestIstioSampleDeployment describes, checks
// its answers, and returns it running.
func runIstioSample(t *testing.T, exe string, extraEnv ...string) *sluice {
	t.Helper()
	c := loadDeployment(t, "istio-rate-limit-service.yaml")
	redisSrv := redistest.Start(t)
	root := t.TempDir() // stands for /data
	mount := ""
	for _, m := range c.VolumeMounts {
		mount = m.MountPath
	}
	if mount != "/data/ratelimit/config" {
		t.Fatalf("ConfigMap mounted at %q, want /data/ratelimit/config", mount)
	}
	dir := filepath.Join(root, strings.TrimPrefix(mount, "/data/"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	configMapMount(t, dir, map[string]string{"config.yaml": `domain: echo-ratelimit
descriptors:
  - key: PATH
    value: "/"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: PATH
    rate_limit: {unit: minute, requests_per_unit: 100}
`})
	s, names := runAsDeploymentFrom(t, exe, c, func(name, v string) string {
		switch name {
		case "REDIS_URL":
			return redisSrv.Addr() // for redis:6379
		case "RUNTIME_ROOT":
			return root // for /data
		}
		return v
	}, append([]string{"PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0"}, extraEnv...)...)

	checkEveryVarRead(t, s, names)
	if !strings.HasPrefix(s.HTTPAddr, "[::]:") || !strings.HasPrefix(s.GRPCAddr, "[::]:") || s.DebugAddr == "" {
		t.Errorf("listening on http %q grpc %q debug %q, want HOST and GRPC_HOST :: and the debug port", s.HTTPAddr, s.GRPCAddr, s.DebugAddr)
	}
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	awayFromBoundary()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(context.Background(), request("echo-ratelimit", []string{"PATH", "/"}))
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("call %d to PATH=/: %v %v, want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	if resp, err := client.ShouldRateLimit(context.Background(), request("echo-ratelimit", []string{"PATH", "/other"})); err != nil ||
		resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 99 {
		t.Errorf("PATH=/other: %v %v, want OK with 99 remaining", resp, err)
	}
	// Decided through Redis: the counters are there.
	if n, err := redistest.Do(redisSrv.Addr(), "DBSIZE"); err != nil || n.(int64) < 2 {
		t.Errorf("Redis holds %v keys (%v), want the two counters", n, err)
	}
	if code, body := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 OK", code, body)
	}
	if code, body := httpGet(t, "http://"+loopback(t, s.DebugAddr)+"/rlconfig"); code != 200 ||
		!strings.Contains(body, "echo-ratelimit.PATH_/: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false") {
		t.Errorf("/rlconfig = %d:\n%s", code, body)
	}
	return s
}

// TestEnvoyGatewayDeployment runs Sluice with the env of the Deployment
// Envoy Gateway creates, its xDS config replaced by files in the same
// directory layout (CONFIG_TYPE=FILE), with TLS certificates made here, a
// real redis-server, and a client that presents a certificate as Envoy
// does.
func TestEnvoyGatewayDeployment(t *testing.T) {
	c := loadDeployment(t, "envoy-gateway-ratelimit-deployment.yaml")
	redisSrv := redistest.Start(t)
	root, certs := t.TempDir(), newTestPKI(t)
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join("testdata", "dropin", "envoy-gateway-default-eg-http.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "default-eg-http.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// A dotfile the layout must skip (RUNTIME_IGNOREDOTFILES=true).
	if err := os.WriteFile(filepath.Join(dir, ".not-a-config"), []byte("not: [yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, names := runAsDeployment(t, c, func(name, v string) string {
		switch name {
		case "CONFIG_TYPE":
			return "FILE" // for GRPC_XDS_SOTW
		case "REDIS_URL":
			return redisSrv.Addr() // for redis.redis.svc:6379
		case "RUNTIME_ROOT":
			return root
		case "PROMETHEUS_ADDR":
			return "127.0.0.1:0" // for :19001
		}
		return strings.Replace(v, "/certs", certs.dir, 1)
	}, "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0")
	checkEveryVarRead(t, s, names)
	checkEGPaths(t, c)

	conn, err := grpc.NewClient(loopback(t, s.GRPCAddr), grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: certs.pool, Certificates: []tls.Certificate{certs.client}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	awayFromBoundary()
	route := "httproute/default/backend/rule/0/match/0"
	desc := []string{route, route, "masked_remote_address", "0.0.0.0/0"}
	for i := 1; i <= 4; i++ {
		resp, err := client.ShouldRateLimit(context.Background(), request("default/eg/http", desc))
		want := rlsv3.RateLimitResponse_OK
		if i == 4 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("call %d: %v %v, want %v", i, resp.GetOverallCode(), err, want)
		}
	}
	if n, err := redistest.Do(redisSrv.Addr(), "DBSIZE"); err != nil || n.(int64) < 1 {
		t.Errorf("Redis holds %v keys (%v), want the counter", n, err)
	}
	if code, body := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+c.ReadinessProbe.HTTPGet.Path); code != 200 || body != "OK" {
		t.Errorf("%s = %d %q, want 200 OK", c.ReadinessProbe.HTTPGet.Path, code, body)
	}
	// envoyproxy/ratelimit's metric names, on PROMETHEUS_ADDR.
	_, metrics := httpGet(t, "http://"+loopback(t, s.MetricsAddr)+"/metrics")
	labels := `{domain="default/eg/http",key1="` + route + "_" + route + `",key2="masked_remote_address_0_0_0_0/0"}`
	for _, want := range []string{"ratelimit_service_rate_limit_total_hits" + labels + " 4",
		"ratelimit_service_rate_limit_within_limit" + labels + " 3",
		"ratelimit_service_rate_limit_over_limit" + labels + " 1",
		"ratelimit_service_rate_limit_near_limit" + labels + " 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics on PROMETHEUS_ADDR lack %q", want)
		}
	}
}

// checkEGPaths checks that what Envoy Gateway's Deployment probes and
// scrapes is where the peer's defaults put it, which the test replaced by
// free ports: /healthcheck on PORT (8080), metrics on PROMETHEUS_ADDR.
func checkEGPaths(t *testing.T, c container) {
	t.Helper()
	if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/healthcheck" || p.HTTPGet.Port != 8080 {
		t.Errorf("readiness probe %+v, want /healthcheck on 8080 (envoyproxy/ratelimit's PORT)", p)
	}
	for _, e := range c.Env {
		if e.Name == "PROMETHEUS_ADDR" && e.Value != ":19001" {
			t.Errorf("PROMETHEUS_ADDR %q, want :19001 (the port Envoy Gateway scrapes)", e.Value)
		}
	}
}

// testPKI is a CA and the certificates Envoy Gateway mounts at /certs:
// tls.crt and tls.key (the rate limit service's), ca.crt; and a client
// certificate from the same CA, as Envoy presents.
type testPKI struct {
	dir    string
	pool   *x509.CertPool
	client tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), pool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoy-gateway"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	p.write(t, "ca.crt", "CERTIFICATE", caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "envoy"},
			DNSNames: []string{"envoy-ratelimit.envoy-gateway-system.svc", "localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	sDER, sKey := leaf(2, x509.ExtKeyUsageServerAuth)
	p.write(t, "tls.crt", "CERTIFICATE", sDER)
	skb, _ := x509.MarshalECPrivateKey(sKey)
	p.write(t, "tls.key", "EC PRIVATE KEY", skb)
	cDER, cKey := leaf(3, x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPeerRuntimeLayout: envoyproxy/ratelimit's config layout from its
// variables alone: every file below RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY, whatever its extension, subdirectories and (with
// RUNTIME_IGNOREDOTFILES=false, the peer's default) dotfiles included, a
// ConfigMap's ..data never loaded twice; on a Redis at a unix socket
// path (REDIS_URL as a path, the peer's default socket type). With the
// peer's settings and no REDIS_URL Sluice dials the peer's default socket,
// so this test, which once relied on the in-memory store then, gives one.
func TestPeerRuntimeLayout(t *testing.T) {
	_, socket := redistest.StartUnix(t)
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "rules")
	if err := os.MkdirAll(filepath.Join(dir, "team"), 0o755); err != nil {
		t.Fatal(err)
	}
	configMapMount(t, dir, map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n"})
	if err := os.WriteFile(filepath.Join(dir, "team", "limits"), []byte("domain: team\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".dotted.cfg"), []byte("domain: dotted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary)
	cmd.Env = []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_APPDIRECTORY=rules", "RUNTIME_IGNOREDOTFILES=false",
		"PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_PORT=0", "LOG_FORMAT=json", "REDIS_URL=" + socket}
	s := startCmd(t, cmd)
	code, body := httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/config")
	var cfg struct{ Domains []string }
	if err := json.Unmarshal([]byte(body), &cfg); code != 200 || err != nil || strings.Join(cfg.Domains, ",") != "dotted,edge,team" {
		t.Errorf("/config = %d %s, want the domains dotted, edge and team", code, body)
	}
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request("team", []string{"k", "v"}))
	if err != nil || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("team k=v: %v %v, want 2 remaining of 3", resp, err)
	}
}
