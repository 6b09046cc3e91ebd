package rlqs

import (
	"errors"
	"fmt"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Codec wraps next, the gRPC codec of Sluice's server (pkg/rls's), so that
// a usage report whose strings are not valid UTF-8 is still accepted, and
// the response naming those buckets is still sent, bytes for bytes.
//
// A bucket id's values may come from request headers (bucket_id_builder's
// custom_value), which Envoy forwards as they came; Go's protobuf refuses a
// proto3 string that is not UTF-8, both decoding the report and encoding the
// response, which would end the stream: every Envoy bucket would fall back
// to its no-assignment behavior (allow all by default) because one client
// sent one bad byte. When next refuses a RateLimitQuotaUsageReports,
// Codec decodes it field by field, keeping every string's bytes; when next
// cannot encode a RateLimitQuotaResponse, Codec encodes each bucket id
// itself. Both are the identity on bytes, so Envoy finds its bucket (it
// hashes the id's bytes). Other messages and errors are left to next.
func Codec(next encoding.CodecV2) encoding.CodecV2 { return codec{next} }

type codec struct{ next encoding.CodecV2 }

func (c codec) Name() string { return c.next.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.next.Unmarshal(data, v)
	r, ok := v.(*rlqsv3.RateLimitQuotaUsageReports)
	if err == nil || !ok {
		return err
	}
	proto.Reset(r)
	if derr := decodeReports(data.Materialize(), r); derr != nil {
		return fmt.Errorf("%w (and decoding it with raw strings: %v)", err, derr)
	}
	return nil
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.next.Marshal(v)
	r, ok := v.(*rlqsv3.RateLimitQuotaResponse)
	if err == nil || !ok {
		return out, err
	}
	b, rerr := encodeResponse(r)
	if rerr != nil {
		return nil, fmt.Errorf("%w (and encoding it with raw strings: %v)", err, rerr)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

var errWire = errors.New("malformed protobuf")

// fields calls f with each field of the message b: its number, wire type,
// bytes (length-delimited) or value (varint). Fields of other wire types are
// skipped.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// decodeReports decodes a RateLimitQuotaUsageReports keeping strings' raw
// bytes. Unknown fields are skipped (the standard decoder keeps but ignores
// them).
func decodeReports(b []byte, r *rlqsv3.RateLimitQuotaUsageReports) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{}
			if err := decodeUsage(v, u); err != nil {
				return err
			}
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, u)
		}
		return nil
	})
}

func decodeUsage(b []byte, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if u.BucketId == nil {
				u.BucketId = &rlqsv3.BucketId{Bucket: map[string]string{}}
			}
			return decodeBucketID(v, u.BucketId.Bucket)
		case num == 2 && typ == protowire.BytesType:
			u.TimeElapsed = &durationpb.Duration{}
			return proto.Unmarshal(v, u.TimeElapsed)
		case num == 3 && typ == protowire.VarintType:
			u.NumRequestsAllowed = n
		case num == 4 && typ == protowire.VarintType:
			u.NumRequestsDenied = n
		}
		return nil
	})
}

// decodeBucketID adds the entries of a BucketId (field 1: map<string,
// string>, one message {1: key, 2: value} per entry) to m.
func decodeBucketID(b []byte, m map[string]string) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var k, val string
		err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				k = string(v)
			case num == 2 && typ == protowire.BytesType:
				val = string(v)
			}
			return nil
		})
		m[k] = val
		return err
	})
}

// encodeResponse encodes r with each bucket id written by hand (raw bytes),
// and the rest of each action by the standard encoder.
func encodeResponse(r *rlqsv3.RateLimitQuotaResponse) ([]byte, error) {
	var out []byte
	for _, a := range r.GetBucketAction() {
		rest, err := proto.Marshal(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: a.GetBucketAction()})
		if err != nil {
			return nil, err
		}
		var id []byte
		for k, v := range a.GetBucketId().GetBucket() {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			id = protowire.AppendTag(id, 1, protowire.BytesType)
			id = protowire.AppendBytes(id, e)
		}
		var act []byte
		if a.GetBucketId() != nil {
			act = protowire.AppendTag(act, 1, protowire.BytesType)
			act = protowire.AppendBytes(act, id)
		}
		act = append(act, rest...)
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, act)
	}
	return out, nil
}
