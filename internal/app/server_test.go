package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// startServer launches a server on the repository's config/.
func startServer(t *testing.T, args ...string) (*server, rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	r := launch(t, append([]string{"--config", "../../config"}, args...)...)
	return r.srv, r.client, r.conn
}

func edgeRequest(descs ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for _, kv := range descs {
		d := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestEndToEnd drives the config/ scenario over real gRPC: an api key's
// search route crosses its limit of 10 a minute, its per-key limit keeps
// counting only admitted requests, other keys and anonymous clients are
// independent, and internal keys are unlimited.
func TestEndToEnd(t *testing.T) {
	_, client, _ := startServer(t)
	ctx := context.Background()
	alice := []string{"api_key", "alice"}
	aliceSearch := []string{"api_key", "alice", "route", "search"}

	for i := 1; i <= 12; i++ {
		resp, err := client.ShouldRateLimit(ctx, edgeRequest(alice, aliceSearch))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.GetStatuses()
		if len(st) != 2 {
			t.Fatalf("call %d: %d statuses, want 2", i, len(st))
		}
		if i <= 10 {
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("call %d: %v, want OK", i, resp.GetOverallCode())
			}
			if got, want := st[0].GetLimitRemaining(), uint32(100-i); got != want {
				t.Errorf("call %d: per_api_key remaining %d, want %d", i, got, want)
			}
			if got, want := st[1].GetLimitRemaining(), uint32(10-i); got != want {
				t.Errorf("call %d: search remaining %d, want %d", i, got, want)
			}
			continue
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("call %d: %v, want OVER_LIMIT", i, resp.GetOverallCode())
		}
		if st[0].GetCode() != rlsv3.RateLimitResponse_OK || st[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("call %d: codes %v %v, want OK OVER_LIMIT", i, st[0].GetCode(), st[1].GetCode())
		}
		// The denied calls consumed nothing from the per-key limit.
		if got := st[0].GetLimitRemaining(); got != 90 {
			t.Errorf("call %d: per_api_key remaining %d, want 90", i, got)
		}
		if cl := st[1].GetCurrentLimit(); cl.GetName() != "search_per_api_key" || cl.GetRequestsPerUnit() != 10 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("call %d: current_limit %v", i, cl)
		}
		var retry string
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() == "Retry-After" {
				retry = h.GetValue()
			}
		}
		if retry == "" {
			t.Errorf("call %d: no Retry-After in %v", i, resp.GetResponseHeadersToAdd())
		}
	}

	// Bob is independent of Alice; the internal key is never limited.
	resp, err := client.ShouldRateLimit(ctx, edgeRequest([]string{"api_key", "bob", "route", "search"}, []string{"api_key_internal", "billing"}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 9 || resp.GetStatuses()[1].GetCurrentLimit() != nil {
		t.Errorf("bob + internal: %v", resp)
	}

	// One client address: 20 a minute, the 21st is over.
	for i := 1; i <= 21; i++ {
		resp, err := client.ShouldRateLimit(ctx, edgeRequest([]string{"remote_address", "203.0.113.9"}))
		if err != nil {
			t.Fatal(err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 21 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.GetOverallCode() != want {
			t.Fatalf("address call %d: %v, want %v", i, resp.GetOverallCode(), want)
		}
	}

	// Bad input names the field.
	_, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"})
	if err == nil || !strings.Contains(err.Error(), "code = InvalidArgument desc = descriptors: must not be empty") {
		t.Errorf("empty request: %v", err)
	}
}

func TestHealthReflectionAndHTTP(t *testing.T) {
	srv, _, conn := startServer(t)
	ctx := context.Background()
	for _, svc := range []string{"", rlsServiceName} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, h, err)
		}
	}

	stream, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}})
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), rlsServiceName) {
		t.Errorf("reflection lists %v, want %s", names, rlsServiceName)
	}
	stream.CloseSend()

	base := "http://" + srv.httpLn.Addr().String()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("GET %s: %v %v", path, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"json"},{"key":"route","value":"search"}]}]}`
	for i := 1; i <= 11; i++ {
		resp, err := http.Post(base+"/json", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 200
		if i == 11 {
			want = 429
		}
		if resp.StatusCode != want || !strings.Contains(string(out), `"overallCode"`) {
			t.Fatalf("POST /json call %d: %d %s, want %d", i, resp.StatusCode, out, want)
		}
		if i == 11 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("POST /json 429 without a Retry-After header: %v", resp.Header)
		}
	}
	resp, err := http.Post(base+"/json", "application/json", strings.NewReader(`{"domain":""}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(out), "domain: must not be empty") {
		t.Errorf("POST /json bad: %d %s", resp.StatusCode, out)
	}
}

// heldStore holds every Apply until release is closed, to keep calls in
// flight.
type heldStore struct {
	limiter.Store
	entered chan struct{}
	release chan struct{}
}

func (h *heldStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.Store.Apply(ctx, hits)
}

// panicStore panics in its first Apply, as a defect would.
type panicStore struct {
	limiter.Store
	once sync.Once
}

func (p *panicStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	p.once.Do(func() { panic("a defect") })
	return p.Store.Apply(ctx, hits)
}

// TestHandlerPanicAnswersInternal: a panic while deciding one call answers
// that call Internal and counts it; the process stays up and the next call
// is decided.
func TestHandlerPanicAnswersInternal(t *testing.T) {
	r := launchWith(t, func(s limiter.Store) limiter.Store { return &panicStore{Store: s} }, "--config", "../../config")
	_, err := r.client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "p"}))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "a defect") {
		t.Fatalf("call that panicked: %v; want Internal naming the panic", err)
	}
	resp, err := r.client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "p"}))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("next call: %v, %v; want OK", resp.GetOverallCode(), err)
	}
	mfs, err := r.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var panics float64 = -1
	for _, mf := range mfs {
		if mf.GetName() == "sluice_grpc_panics_total" {
			panics = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if panics != 1 {
		t.Errorf("sluice_grpc_panics_total = %v, want 1", panics)
	}
}

// TestShutdownDrainsInFlightCalls: a call in flight when SIGTERM arrives
// completes with its answer, a new connection is refused once the drain
// starts, and serve returns nil within delay + timeout.
func TestShutdownDrainsInFlightCalls(t *testing.T) {
	held := &heldStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	delay := newHeldDelay()
	r := start(t, setup{hooks: hooks{wrapStore: func(s limiter.Store) limiter.Store { held.Store = s; return held }, delay: delay.wait}},
		"--config", "../../config", "--shutdown-delay", "100ms", "--shutdown-timeout", "5s")
	inFlight := make(chan error, 1)
	go func() {
		resp, err := r.client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "inflight"}))
		if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("answer %v", resp)
		}
		inFlight <- err
	}()
	<-held.entered
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	<-delay.entered
	close(delay.release) // the delay has passed: the drain begins
	// The drain closes the listener as it begins: a new connection, made
	// after the delay ended, is refused by then or a moment later.
	served := 0
	for deadline := time.Now().Add(3 * time.Second); ; served++ {
		if !newConnServed(t, r.srv.grpcLn.Addr().String()) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("a new connection during the drain was served (%d times in 3 s)", served)
			break
		}
	}
	close(held.release)
	if err := <-inFlight; err != nil {
		t.Errorf("in-flight call: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: %v", err)
	}
	if d := time.Since(start); d > 5100*time.Millisecond {
		t.Errorf("shutdown took %v, more than delay + timeout", d)
	}
}

// TestShutdownLetsInFlightCallsFinish: during the shutdown delay health says
// NOT_SERVING and calls still work; then serve returns nil and calls fail.
func TestShutdownLetsInFlightCallsFinish(t *testing.T) {
	delay := newHeldDelay()
	r := start(t, setup{hooks: hooks{delay: delay.wait}}, "--config", "../../config", "--shutdown-delay", "200ms")
	client := r.client
	health := healthpb.NewHealthClient(r.conn)
	stopped := make(chan error, 1)
	if _, err := client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "x"})); err != nil {
		t.Fatal(err)
	}
	go func() { stopped <- r.stop() }()
	// During the shutdown delay health says NOT_SERVING and calls still work.
	<-delay.entered
	h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsServiceName})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health during shutdown = %v, %v; want NOT_SERVING", h, err)
	}
	if _, err := client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "x"})); err != nil {
		t.Errorf("call during shutdown delay: %v", err)
	}
	close(delay.release)
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "x"})); err == nil {
		t.Error("call after shutdown succeeded")
	}
}

// TestReadinessAndStore: with the store unreachable /readyz is 503, unless
// --ready-requires-store=false (domains then answer by failure_mode).
func TestReadinessAndStore(t *testing.T) {
	dead := "redis://127.0.0.1:1/0" // nothing listens on port 1
	for _, tc := range []struct {
		flag string
		want int
	}{{"--ready-requires-store=true", 503}, {"--ready-requires-store=false", 200}} {
		srv, _, _ := startServer(t, "--redis-url", dead, tc.flag)
		resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: /readyz = %d, want %d", tc.flag, resp.StatusCode, tc.want)
		}
	}
}

func TestCheckCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"check", "../../config"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("check config = %d, stderr %s", code, errOut.String())
	}
	if got := out.String(); got != "ok: 2 domains in 2 files\n" { // edge.yaml, algorithms.yaml
		t.Errorf("check output %q", got)
	}
}

// TestMetricsEndpoint drives a known sequence over gRPC and reads exact
// counter values from /metrics.
func TestMetricsEndpoint(t *testing.T) {
	srv, client, _ := startServer(t)
	for range 22 {
		client.ShouldRateLimit(context.Background(), edgeRequest([]string{"remote_address", "198.51.100.7"}))
	}
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_rate_limit_total_hits_total{domain="edge",rule="per_client_address"} 22`,
		`sluice_rate_limit_within_limit_total{domain="edge",rule="per_client_address"} 20`,
		`sluice_rate_limit_over_limit_total{domain="edge",rule="per_client_address"} 2`,
		// 0.8 of 20 is 16: the 17th to 20th admitted hits are near the limit.
		`sluice_rate_limit_near_limit_total{domain="edge",rule="per_client_address"} 4`,
		`sluice_store_calls_total{result="ok"} 22`,
		`sluice_request_duration_seconds_count{code="OK"} 22`,
		`sluice_config_loads_total{result="ok"} 1`,
		`sluice_config_last_load_success 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestFailedStartReleasesListeners: when the HTTP address cannot be bound,
// the gRPC listener already opened is closed again.
func TestFailedStartReleasesListeners(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	grpcAddr := freeAddr(t)
	s, err := settings.Parse([]string{"--config", "../../config", "--grpc-addr", grpcAddr, "--http-addr", taken.Addr().String()},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newServer(s, zap.NewNop(), hooks{}); err == nil || !strings.Contains(err.Error(), "--http-addr") {
		t.Fatalf("newServer = %v, want an --http-addr error", err)
	}
	ln, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("gRPC address still held after a failed start: %v", err)
	}
	ln.Close()
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestBindErrorHints checks that an address already in use names the
// setting to change, for the gRPC and HTTP listeners as for the debug one.
func TestBindErrorHints(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flag := range []string{"--grpc-addr", "--http-addr", "--debug-addr"} {
		t.Run(flag, func(t *testing.T) {
			args := []string{"--config", "../../config", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"}
			args = append(args, flag, taken.Addr().String())
			s, err := settings.Parse(args, func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			_, err = newServer(s, zap.NewNop(), hooks{})
			want := "(set " + flag + " to another address"
			if err == nil || !strings.HasPrefix(err.Error(), flag+": ") || !strings.Contains(err.Error(), want) {
				t.Fatalf("newServer with %s taken = %v, want %q and %q in it", flag, err, flag+": ", want)
			}
		})
	}
}

// TestNotReadyUntilStoreWarm: with Redis down at start, the server is not
// ready, and says the store is not warm (connections and library), and
// gRPC health is NOT_SERVING from the first probe on, not SERVING until the
// first check; with Redis up, its connections are opened and it is ready.
func TestNotReadyUntilStoreWarm(t *testing.T) {
	srv, _, conn := startServer(t, "--redis-url", "redis://127.0.0.1:1/0", "--health-interval", "1h")
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "store not ready: its connections are not open or its limiter library is not loaded"; resp.StatusCode != 503 || strings.TrimSpace(string(body)) != want {
		t.Errorf("/readyz with Redis down = %d %q, want 503 %q", resp.StatusCode, body, want)
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsServiceName})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health with Redis down = %v, %v; want NOT_SERVING", h, err)
	}

	up, _, _ := startServer(t, "--redis-url", "redis://"+redistest.Addr(t))
	if !up.store.warmed.Load() {
		t.Error("with Redis up, the store is not warm after the start")
	}
	if reason := up.notReady(context.Background()); reason != "" {
		t.Errorf("with Redis up: not ready: %s", reason)
	}
}

// heldDelay is a shutdown delay (hooks.delay) that a test ends: wait
// signals entered, then returns once release is closed.
type heldDelay struct {
	entered chan struct{}
	release chan struct{}
}

func newHeldDelay() *heldDelay {
	return &heldDelay{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (d *heldDelay) wait(time.Duration) {
	d.entered <- struct{}{}
	<-d.release
}

// newConnServed reports whether a call on a new connection to addr is
// answered within a second.
func newConnServed(t *testing.T, addr string) bool {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, edgeRequest([]string{"api_key", "late"}))
	return err == nil
}
