package rlqs

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestCodecKeepsRawBytes: reports and responses whose bucket ids (and
// domain) hold bytes that are not UTF-8 go through Codec both ways unchanged,
// where the standard codec refuses them; valid messages are encoded by the
// standard codec, byte for byte.
func TestCodecKeepsRawBytes(t *testing.T) {
	std := encoding.GetCodecV2(grpcproto.Name)
	c := Codec(std)
	bad := "caf\xe9"
	svc := &Service{opts: Options{AssignmentTTL: time.Second}}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		new  func() proto.Message
	}{
		{"report", &rlqsv3.RateLimitQuotaUsageReports{Domain: "d\xff", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": bad, "k\xfe": "v"}}, TimeElapsed: durationpb.New(2 * time.Second),
				NumRequestsAllowed: 7, NumRequestsDenied: 3},
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"ok": "fine"}}, NumRequestsAllowed: 1},
		}}, func() proto.Message { return &rlqsv3.RateLimitQuotaUsageReports{} }},
		{"response", &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
			svc.assign(&rlqsv3.BucketId{Bucket: map[string]string{"name": bad}}, tokenBucket(10, time.Minute, 1)),
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"x": bad}}, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}},
		}}, func() proto.Message { return &rlqsv3.RateLimitQuotaResponse{} }},
	} {
		if _, err := std.Marshal(tc.msg); err == nil {
			t.Fatalf("%s: the standard codec encodes it: not a test of the fallback", tc.name)
		}
		wire, err := c.Marshal(tc.msg)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", tc.name, err)
		}
		got := tc.new()
		if err := c.Unmarshal(wire, got); err != nil {
			t.Fatalf("%s: Unmarshal: %v", tc.name, err)
		}
		if !proto.Equal(got, tc.msg) {
			t.Errorf("%s: round trip = %v, want %v", tc.name, got, tc.msg)
		}
	}

	valid := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
		svc.assign(&rlqsv3.BucketId{Bucket: map[string]string{"a": "b"}}, blanket(AllowAll))}}
	out, err := c.Marshal(valid)
	want, _ := proto.Marshal(valid)
	if err != nil || string(out.Materialize()) != string(want) {
		t.Errorf("a valid response is encoded differently: %v", err)
	}
}
