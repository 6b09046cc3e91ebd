package rlqs

import (
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestCodecKeepsRawBytes: a report whose bucket id holds bytes that are not
// UTF-8 decodes with those bytes, and a response naming that bucket encodes
// them back unchanged; valid messages go through the standard codec.
func TestCodecKeepsRawBytes(t *testing.T) {
	c := Codec(encoding.GetCodecV2(grpcproto.Name))
	bad := "caf\xe9"
	// The standard encoder refuses it too, so the report is built by hand
	// from a valid one with the value's bytes swapped.
	valid := &rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "cafX"}}, TimeElapsed: durationpb.New(2 * time.Second),
		NumRequestsAllowed: 7, NumRequestsDenied: 3}}}
	wire, err := proto.Marshal(valid)
	if err != nil {
		t.Fatal(err)
	}
	wire = []byte(strings.Replace(string(wire), "cafX", bad, 1))
	var got rlqsv3.RateLimitQuotaUsageReports
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	u := got.GetBucketQuotaUsages()[0]
	if got.GetDomain() != "d" || u.GetBucketId().GetBucket()["name"] != bad || u.GetNumRequestsAllowed() != 7 ||
		u.GetNumRequestsDenied() != 3 || u.GetTimeElapsed().AsDuration() != 2*time.Second {
		t.Errorf("decoded %v", &got)
	}

	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
		(&Service{opts: Options{AssignmentTTL: time.Second}}).assign(u.GetBucketId(), blanket(DenyAll))}}
	out, err := c.Marshal(resp)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	b := out.Materialize()
	// Decode it back the raw way: the bucket id's value and the action.
	var id map[string]string
	var action *rlqsv3.RateLimitQuotaResponse_BucketAction
	err = fields(b, func(_ protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
		id = map[string]string{}
		action = &rlqsv3.RateLimitQuotaResponse_BucketAction{}
		return fields(v, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) error {
			if num == 1 {
				return decodeBucketID(v, id)
			}
			var rest rlqsv3.RateLimitQuotaResponse_BucketAction
			var tagged []byte
			tagged = protowire.AppendTag(tagged, num, protowire.BytesType)
			tagged = protowire.AppendBytes(tagged, v)
			if err := proto.Unmarshal(tagged, &rest); err != nil {
				return err
			}
			proto.Merge(action, &rest)
			return nil
		})
	})
	if err != nil || id["name"] != bad || action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule().String() != "DENY_ALL" {
		t.Errorf("encoded response decodes to %q %v, %v", id, action, err)
	}

	// A valid response is the standard encoding.
	ok := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{
		(&Service{opts: Options{AssignmentTTL: time.Second}}).assign(&rlqsv3.BucketId{Bucket: map[string]string{"a": "b"}}, blanket(AllowAll))}}
	out, err = c.Marshal(ok)
	want, _ := proto.Marshal(ok)
	if err != nil || string(out.Materialize()) != string(want) {
		t.Errorf("valid response encoded differently: %v", err)
	}
}
