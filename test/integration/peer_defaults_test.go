package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The peer's defaults: run with envoyproxy/ratelimit's settings, Sluice
// counts, stores and answers as the peer does where that changes an
// outcome (hits counted, Redis never replaced by memory, headers), and with
// its own defaults otherwise.

// peerEnv is the environment of a trial of the peer's settings: the
// issue's LOG_LEVEL=info USE_STATSD=false, the config directory laid out as
// the peer's (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config), free ports, JSON
// logs, then extra.
func peerEnv(t *testing.T, config string, extra ...string) []string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return append([]string{"LOG_LEVEL=info", "USE_STATSD=false", "RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_PORT=0", "LOG_FORMAT=json"}, extra...)
}

// startPeer runs the binary with env alone and connects a client.
func startPeer(t *testing.T, env []string) *sluice {
	t.Helper()
	cmd := exec.Command(binary)
	cmd.Env, cmd.Dir = env, t.TempDir()
	s := startCmd(t, cmd)
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.Conn, s.Client = conn, rlsv3.NewRateLimitServiceClient(conn)
	return s
}

// budgetConfig is the token budget: 10,000 an hour.
const budgetConfig = "domain: llm\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10000}\n"

// report sends user=u with hits_addend n (0: a check) and returns the code.
func report(t *testing.T, s *sluice, n uint64) rlsv3.RateLimitResponse_Code {
	t.Helper()
	d := &rlcommon.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(n),
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}
	resp, err := s.Client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("hits_addend %d: %v", n, err)
	}
	return resp.GetOverallCode()
}

// TestPeerCountsEveryHit: with the peer's settings and
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset, a usage report that does
// not fit is over the limit but still counts, as in the peer (Envoy
// Gateway's response cost), so the budget runs out; with it true a denied
// report consumes nothing; the start-up line says which is in force.
func TestPeerCountsEveryHit(t *testing.T) {
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for _, tc := range []struct {
		name, stop, line string
		after            rlsv3.RateLimitResponse_Code
	}{
		{"unset", "", "--count-denied=true (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset", over},
		{"true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "--count-denied=false (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)", ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redisSrv := redistest.Start(t)
			env := peerEnv(t, budgetConfig, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisSrv.Addr())
			if tc.stop != "" {
				env = append(env, tc.stop)
			}
			s := startPeer(t, env)
			if applied, _ := startupSettings(t, s); !strings.Contains(strings.Join(applied, "\n"), tc.line) {
				t.Errorf("start-up line lacks %q: %q", tc.line, applied)
			}
			var got []rlsv3.RateLimitResponse_Code
			for _, n := range []uint64{0, 8000, 0, 8000, 0, 0} {
				got = append(got, report(t, s, n))
			}
			// The second report's own code is not asserted: Envoy sends
			// usage after the response, so only the checks after it matter.
			got[3] = ok
			want := []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, tc.after, tc.after}
			if !equalCodes(got, want) {
				t.Errorf("check, report 8000, check, report 8000 (not asserted), check, check = %v, want %v", got, want)
			}
		})
	}
}

func equalCodes(a, b []rlsv3.RateLimitResponse_Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPeerRedisDefault: with the peer's settings and no REDIS_URL, Sluice
// uses the peer's default socket (and is not ready while nothing listens
// there), never the in-memory store.
func TestPeerRedisDefault(t *testing.T) {
	s := startPeer(t, peerEnv(t, budgetConfig))
	applied, _ := startupSettings(t, s)
	if want := "--redis-url=unix:///var/run/nutcracker/ratelimit.sock (REDIS_URL unset"; !strings.Contains(strings.Join(applied, "\n"), want) {
		t.Errorf("start-up line lacks %q: %q", want, applied)
	}
	if strings.Contains(s.Log(), `"store":"memory"`) {
		t.Errorf("counts in memory:\n%s", s.Log())
	}
	resp, err := http.Get("http://" + loopback(t, s.HTTPAddr) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with no Redis at the default socket, want 503", resp.StatusCode)
	}
}

// TestPeerRedisRefused: a Redis setting of the peer's that names no Redis
// stops the start with exit status 2 and one line naming the setting, as a
// Sentinel one does.
func TestPeerRedisRefused(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_TYPE=cluster"}, `sluice: REDIS_URL="" with REDIS_TYPE=cluster`},
		{[]string{"REDIS_TYPE=cluster", "REDIS_URL="}, `sluice: REDIS_URL="" with REDIS_TYPE=cluster`},
		{[]string{"REDIS_TYPE=cluster", "REDIS_URL= , ,"}, `sluice: REDIS_URL=", ," with REDIS_TYPE=cluster`},
		{[]string{"REDIS_URL="}, `sluice: REDIS_URL="" (envoyproxy/ratelimit's setting): set but empty`},
		{[]string{"REDIS_TYPE=sentinel", "REDIS_URL=s1:26379"}, `sluice: REDIS_URL="s1:26379" with REDIS_TYPE=sentinel`},
	} {
		cmd := exec.Command(binary)
		cmd.Env, cmd.Dir = append(tc.env, "PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0"), t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%q: still running after 10s:\n%s", tc.env, stderr.String())
			continue
		}
		var exit *exec.ExitError
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
			t.Errorf("%q: %v, stderr:\n%s\nwant exit status 2 and one line starting %q", tc.env, err, stderr.String(), tc.want)
		}
	}
}

// twoPerMinute is a limit three calls go over.
const twoPerMinute = "domain: web\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"

// threeCalls sends path=/ three times (the third is over the limit of
// two) and returns the responses; every duration_until_reset must be whole
// seconds, whatever the settings.
func threeCalls(t *testing.T, s *sluice) []*rlsv3.RateLimitResponse {
	t.Helper()
	var out []*rlsv3.RateLimitResponse
	for range 3 {
		r := s.call(t, "web", []string{"path", "/"})
		if d := r.GetStatuses()[0].GetDurationUntilReset(); d.GetNanos() != 0 || d.GetSeconds() < 1 {
			t.Errorf("duration_until_reset = %v, want whole seconds (rounded up)", d.AsDuration())
		}
		out = append(out, r)
	}
	if got := out[2].GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third call %v, want OVER_LIMIT", got)
	}
	return out
}

// TestPeerResponseHeaders: with the peer's settings no rate limit header is
// added unless LIMIT_RESPONSE_HEADERS_ENABLED=true, which adds the peer's
// three, and a Sluice setting still wins; Sluice's own default adds the
// draft headers and Retry-After.
func TestPeerResponseHeaders(t *testing.T) {
	redisSrv := redistest.Start(t)
	peerRedis := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisSrv.Addr()}
	for _, tc := range []struct {
		name        string
		env         []string // nil: Sluice's own settings
		want, never []string
	}{
		{"Sluice's default", nil, []string{"RateLimit", "RateLimit-Policy", "Retry-After"}, []string{"RateLimit-Limit"}},
		{"peer", peerRedis, nil, []string{"RateLimit", "RateLimit-Policy", "Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{"peer, headers enabled", append(peerRedis, "LIMIT_RESPONSE_HEADERS_ENABLED=true"),
			[]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}, []string{"RateLimit", "RateLimit-Policy"}},
		{"peer, SLUICE_RESPONSE_HEADERS wins", append(peerRedis, "SLUICE_RESPONSE_HEADERS=draft"),
			[]string{"RateLimit", "RateLimit-Policy", "Retry-After"}, []string{"RateLimit-Limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *sluice
			if tc.env == nil {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(twoPerMinute), 0o644); err != nil {
					t.Fatal(err)
				}
				s = startSluice(t, "--config", dir, "--redis-url", "redis://"+redisSrv.Addr(), "--redis-prefix", redistest.Prefix(t.Name()))
			} else {
				s = startPeer(t, peerEnv(t, twoPerMinute, append(tc.env, "CACHE_KEY_PREFIX="+redistest.Prefix(t.Name()))...))
			}
			awayFromBoundary()
			got := headers(threeCalls(t, s)[2])
			for _, h := range tc.want {
				if _, ok := got[h]; !ok {
					t.Errorf("over limit: no %s header in %v", h, got)
				}
			}
			for _, h := range tc.never {
				if _, ok := got[h]; ok {
					t.Errorf("over limit: %s header in %v", h, got)
				}
			}
		})
	}
}

// TestPeerConfigLoadMetrics: with the peer's metric names on
// (USE_PROMETHEUS=true), its config-load counters are served too, counting
// loads that succeeded and failed.
func TestPeerConfigLoadMetrics(t *testing.T) {
	redisSrv := redistest.Start(t)
	env := peerEnv(t, twoPerMinute, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisSrv.Addr(), "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0")
	s := startPeer(t, env)
	_, metrics := httpGet(t, "http://"+s.MetricsAddr+"/metrics")
	for _, want := range []string{"# TYPE ratelimit_service_config_load_success counter\nratelimit_service_config_load_success 1\n",
		"# TYPE ratelimit_service_config_load_error counter\nratelimit_service_config_load_error 0\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var root string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RUNTIME_ROOT="); ok {
			root = v
		}
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "config.yaml"), []byte("domain: [broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, 100*time.Millisecond, func() bool {
		_, metrics = httpGet(t, "http://"+s.MetricsAddr+"/metrics")
		return strings.Contains(metrics, "\nratelimit_service_config_load_error 1\n")
	}) {
		t.Fatalf("no ratelimit_service_config_load_error 1 10s after a broken config:\n%s", metrics)
	}
}

// TestDebugCmdlineRedacted: the debug listener's /debug/pprof/cmdline
// shows no password given by flag, and the debug listener binds loopback
// by default.
func TestDebugCmdlineRedacted(t *testing.T) {
	redisSrv := redistest.Start(t)
	s := startSluice(t, "--redis-url", "redis://default:pw-s3cret-42@"+redisSrv.Addr(), "--redis-sentinel-auth=sentinel-s3cret-42")
	code, body := httpGet(t, "http://"+s.DebugAddr+"/debug/pprof/cmdline")
	if code != 200 || strings.Contains(body, "s3cret") || !strings.Contains(body, "redis://default:xxxxx@"+redisSrv.Addr()) {
		t.Errorf("/debug/pprof/cmdline = %d %q, want the arguments with no password", code, strings.ReplaceAll(body, "\x00", " "))
	}
	if strings.Contains(s.Log(), "s3cret") {
		t.Errorf("the log shows a password:\n%s", s.Log())
	}
	out, err := exec.Command(binary, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `(default "127.0.0.1:6070")`) {
		t.Errorf("--help: %v, want --debug-addr's default 127.0.0.1:6070:\n%s", err, out)
	}
}
