package rls

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wireRequest writes a RateLimitRequest by hand, so values may hold bytes
// that proto.Marshal would refuse.
func wireRequest(domain string, values ...string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, v := range values {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, "api_key")
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, v)
		var d []byte
		d = protowire.AppendTag(d, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, e)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

func TestCodecKeepsInvalidUTF8(t *testing.T) {
	c := Codec()
	var req rlsv3.RateLimitRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wireRequest("test", "a\xff", "a\xfe", "ok"))}, &req); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	got := []string{}
	for _, d := range req.GetDescriptors() {
		got = append(got, d.GetEntries()[0].GetValue())
	}
	if req.GetDomain() != "test" || len(got) != 3 || got[0] != "a\xff" || got[1] != "a\xfe" || got[2] != "ok" {
		t.Errorf("decoded %q %q", req.GetDomain(), got)
	}
	// The standard codec refuses it: that is what Codec repairs.
	var std rlsv3.RateLimitRequest
	if err := proto.Unmarshal(wireRequest("test", "a\xff"), &std); err == nil {
		t.Error("proto.Unmarshal accepted invalid UTF-8; the fallback is no longer needed")
	}
	// Each raw value counts in its own counter.
	s, _ := newTestService(t, Options{})
	for i, want := range []string{"OK [OK:2 OK:2 OK:2]", "OK [OK:1 OK:1 OK:1]"} {
		if got := brief(call(t, s, &req)); got != want {
			t.Errorf("call %d: %s, want %s", i, got, want)
		}
	}
}

// FuzzCodec checks the fallback decoder against proto.Unmarshal on every
// message the standard decoder accepts, and that it never panics.
func FuzzCodec(f *testing.F) {
	full := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries:        []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}, {Key: "k2"}},
		Limit:          &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)},
		HitsAddend:     wrapperspb.UInt64(7),
		IsNegativeHits: true,
	}}}
	b, _ := proto.Marshal(full)
	f.Add(b)                            // every field set
	f.Add(wireRequest("test", "a\xff")) // invalid UTF-8
	f.Add([]byte{0x0a, 0x05, 'x'})      // truncated
	f.Add(append(b, 0xf8, 0x01, 0x02))  // unknown field appended
	f.Fuzz(func(t *testing.T, b []byte) {
		var got rlsv3.RateLimitRequest
		derr := decodeRequest(b, &got)
		var want rlsv3.RateLimitRequest
		if err := proto.Unmarshal(b, &want); err == nil {
			if derr != nil {
				t.Fatalf("proto.Unmarshal accepts, decodeRequest says %v", derr)
			}
			want.ProtoReflect().SetUnknown(nil)
			for _, d := range want.GetDescriptors() {
				d.ProtoReflect().SetUnknown(nil)
				for _, e := range d.GetEntries() {
					e.ProtoReflect().SetUnknown(nil)
				}
			}
			if !proto.Equal(&got, &want) {
				t.Fatalf("decodeRequest = %v, proto.Unmarshal = %v", &got, &want)
			}
		}
	})
}
