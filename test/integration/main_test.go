// Package integration runs the built sluice binary against real
// redis-server processes and drives it with a go-control-plane gRPC client,
// the way Envoy does. Nothing here skips: a missing redis-server or a binary
// that does not build fails the run with the fix to apply.
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/redistest"
)

// binary is the sluice binary built once for the whole run, or
// $SLUICE_TEST_BINARY when set (to run the same tests against another build,
// for example an earlier commit's, when comparing figures).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-integration")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = os.Getenv("SLUICE_TEST_BINARY")
	if binary == "" {
		binary = filepath.Join(dir, "sluice")
		// Stamped as make build stamps it, so /config shows the release;
		// -trimpath as the image's build, so TestImage's linux/amd64 build
		// finds every package compiled (the stamp is the linker's).
		v, err := os.ReadFile("../../VERSION")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		stamp := "-X github.com/sluicehq/sluice/internal/version.stamp=" + strings.TrimSpace(string(v))
		build := exec.Command("go", "build", "-trimpath", "-ldflags", stamp, "-o", binary, "./cmd/server")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building sluice failed (run 'go build ./cmd/server' to see why): %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := redistest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// sluice is one running sluice process.
type sluice struct {
	cmd         *exec.Cmd
	GRPCAddr    string
	HTTPAddr    string
	DebugAddr   string // "" when the debug listener is off
	MetricsAddr string // "" without --metrics-addr
	Client      rlsv3.RateLimitServiceClient
	Conn        *grpc.ClientConn

	mu     sync.Mutex
	stderr strings.Builder
	exited chan error
}

// Log returns what the process logged so far.
func (s *sluice) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// startSluice runs the binary with args on 127.0.0.1 ports chosen at run
// time, waits for its "listening" log line, connects a plaintext client,
// and stops it with SIGTERM at the end of the test, requiring exit status 0.
func startSluice(t *testing.T, args ...string) *sluice {
	t.Helper()
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Dir = "../.."
	s := startCmd(t, cmd)
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.Conn = conn
	s.Client = rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() { conn.Close() })
	return s
}

// startCmd starts cmd (the binary, however invoked), waits for its
// "listening" log line (JSON logs), and stops it with SIGTERM at the end of
// the test, requiring exit status 0. It does not connect a client.
func startCmd(t *testing.T, cmd *exec.Cmd) *sluice {
	t.Helper()
	s := &sluice{cmd: cmd, exited: make(chan error, 1)}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			var l struct {
				Msg         string `json:"msg"`
				GRPCAddr    string `json:"grpc_addr"`
				HTTPAddr    string `json:"http_addr"`
				DebugAddr   string `json:"debug_addr"`
				MetricsAddr string `json:"metrics_addr"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" {
				s.GRPCAddr, s.HTTPAddr, s.DebugAddr, s.MetricsAddr = l.GRPCAddr, l.HTTPAddr, l.DebugAddr, l.MetricsAddr
				once.Do(func() { close(ready) })
			}
		}
		io.Copy(io.Discard, stderr)
		s.exited <- s.cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-s.exited:
		t.Fatalf("sluice exited before listening: %v\n%s", err, s.Log())
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("sluice did not start listening:\n%s", s.Log())
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-s.exited:
			if err != nil {
				t.Errorf("sluice exited with %v after SIGTERM\n%s", err, s.Log())
			}
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			t.Errorf("sluice did not exit after SIGTERM\n%s", s.Log())
		}
	})
	return s
}

// eventually checks cond every interval until it holds or within has
// passed, and reports whether it held. It is how a test here waits for a
// state of the binary, of Redis or of a page that nothing announces: a poll
// of that state with a deadline is a synchronisation point, where a sleep
// of a guessed length is not. The caller fails the test with its own
// message.
func eventually(within, every time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(every) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// call sends one request built from descriptors given as key, value lists.
func (s *sluice) call(t *testing.T, domain string, descs ...[]string) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.Client.ShouldRateLimit(context.Background(), request(domain, descs...))
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s %v): %v", domain, descs, err)
	}
	if len(resp.GetStatuses()) != len(descs) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(descs))
	}
	return resp
}

func request(domain string, descs ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descs {
		d := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// headers returns the response headers Sluice asks Envoy to add, by name.
func headers(r *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, kv := range r.GetResponseHeadersToAdd() {
		h[kv.GetKey()] = kv.GetValue()
	}
	return h
}
