package app

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestQuotaStreamsServedAndStopped: the quota service answers on the gRPC
// port with the server's config, its health is reported, and a shutdown
// ends open quota streams (UNAVAILABLE, for Envoy to reopen elsewhere)
// instead of waiting --shutdown-timeout for streams that never end.
func TestQuotaStreamsServedAndStopped(t *testing.T) {
	r := launch(t, "--config", "../../config", "--rlqs-assignment-ttl", "3s", "--shutdown-timeout", "10s")
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(r.conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"route": "search", "api_key": "alice"}}, NumRequestsAllowed: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	q := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if q.GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue() != 10 || q.GetAssignmentTimeToLive().AsDuration() != 3*time.Second {
		t.Errorf("assignment = %v, want search_per_api_key's 10 per minute for 3 s", q)
	}
	waitServing(t, r)

	start := time.Now()
	if err := r.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown with an open quota stream took %v", d)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("quota stream ended with %v, want UNAVAILABLE", err)
	}
}

// waitServing waits for the health of the quota service to say SERVING.
func waitServing(t *testing.T, r *running) {
	t.Helper()
	health := healthpb.NewHealthClient(r.conn)
	var h *healthpb.HealthCheckResponse
	var err error
	if !waitUntil(5*time.Second, 20*time.Millisecond, func() bool {
		h, err = health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlqsServiceName})
		return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}) {
		t.Fatalf("health of %s = %v, %v; want SERVING", rlqsServiceName, h, err)
	}
}
