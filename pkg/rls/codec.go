package rls

import (
	"errors"
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Codec returns the gRPC codec for Sluice's server (install it with
// grpc.ForceServerCodecV2). It is the standard proto codec, except that a
// RateLimitRequest whose strings are not valid UTF-8 is still accepted.
//
// Envoy forwards header bytes as they came, and Go's protobuf refuses a
// proto3 string that is not UTF-8, which would fail the call and hand every
// such request to Envoy's failure mode (fail-open by default): a way around
// every limit for any client that sends one bad byte. When the standard
// decoder refuses a RateLimitRequest, Codec decodes it field by field and
// keeps every string's bytes exactly as sent. That repair is deterministic
// and injective (the identity on bytes): each distinct value counts in its own
// counter and matches config values byte for byte. Other messages and other
// errors are left to the standard codec.
func Codec() encoding.CodecV2 { return codec{encoding.GetCodecV2(grpcproto.Name)} }

type codec struct{ std encoding.CodecV2 }

func (c codec) Name() string                           { return c.std.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.std.Unmarshal(data, v)
	req, ok := v.(*rlsv3.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	buf := data.Materialize()
	proto.Reset(req)
	if derr := decodeRequest(buf, req); derr != nil {
		return fmt.Errorf("%w (and decoding it with raw strings: %v)", err, derr)
	}
	return nil
}

var errWire = errors.New("malformed protobuf")

var merge = proto.UnmarshalOptions{Merge: true}

// decodeRequest decodes a RateLimitRequest keeping strings' raw bytes.
// Unknown fields are skipped, as the standard decoder keeps but ignores them.
func decodeRequest(b []byte, req *rlsv3.RateLimitRequest) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			req.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			d := &rlcommon.RateLimitDescriptor{}
			if err := decodeDescriptor(v, d); err != nil {
				return err
			}
			req.Descriptors = append(req.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			req.HitsAddend = uint32(n)
		}
		return nil
	})
}

func decodeDescriptor(b []byte, d *rlcommon.RateLimitDescriptor) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := &rlcommon.RateLimitDescriptor_Entry{}
			err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.Entries = append(d.Entries, e)
		// A singular message field seen twice is merged, as protobuf does.
		case num == 2 && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{}
			}
			if err := merge.Unmarshal(v, d.Limit); err != nil {
				return err
			}
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			if err := merge.Unmarshal(v, d.HitsAddend); err != nil {
				return err
			}
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = n != 0
		}
		return nil
	})
}

// fields calls f for every field of the message in b: its number, wire type,
// and value (bytes for length-delimited fields, n for varints).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errWire
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return errWire
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
