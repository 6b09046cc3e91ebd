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

// Codec wraps next, a gRPC codec (on Sluice's server, pkg/rls's), so that
// the quota service's messages whose strings are not valid UTF-8 are still
// decoded and encoded, bytes for bytes.
//
// A bucket id's values may come from request headers (bucket_id_builder's
// custom_value), which Envoy forwards as they came; Go's protobuf refuses a
// proto3 string that is not UTF-8, both decoding the report and encoding the
// response, which would end the stream: every Envoy bucket would fall back
// to its no-assignment behavior (allow all by default) because one client
// sent one bad byte. When next refuses a RateLimitQuotaUsageReports or a
// RateLimitQuotaResponse, Codec decodes or encodes it field by field,
// keeping every string's bytes: the identity on bytes, so Envoy finds its
// bucket (it hashes the id's bytes). Other messages and errors are left to
// next. Clients may use it too (tests send such bucket ids with it).
func Codec(next encoding.CodecV2) encoding.CodecV2 { return codec{next} }

type codec struct{ next encoding.CodecV2 }

func (c codec) Name() string { return c.next.Name() }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.next.Unmarshal(data, v)
	if err == nil {
		return err
	}
	var derr error
	switch m := v.(type) {
	case *rlqsv3.RateLimitQuotaUsageReports:
		proto.Reset(m)
		derr = decodeReports(data.Materialize(), m)
	case *rlqsv3.RateLimitQuotaResponse:
		proto.Reset(m)
		derr = decodeResponse(data.Materialize(), m)
	default:
		return err
	}
	if derr != nil {
		return fmt.Errorf("%w (and decoding it with raw strings: %v)", err, derr)
	}
	return nil
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.next.Marshal(v)
	if err == nil {
		return out, err
	}
	var (
		b    []byte
		rerr error
	)
	switch m := v.(type) {
	case *rlqsv3.RateLimitQuotaUsageReports:
		b, rerr = encodeReports(m)
	case *rlqsv3.RateLimitQuotaResponse:
		b, rerr = encodeResponse(m)
	default:
		return out, err
	}
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
		b, err := withID(a.GetBucketId(), &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: a.GetBucketAction()})
		if err != nil {
			return nil, err
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out, nil
}

// encodeReports encodes r with its domain and bucket ids written by hand.
func encodeReports(r *rlqsv3.RateLimitQuotaUsageReports) ([]byte, error) {
	var out []byte
	if r.GetDomain() != "" {
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendString(out, r.GetDomain())
	}
	for _, u := range r.GetBucketQuotaUsages() {
		rest := proto.Clone(u).(*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage)
		rest.BucketId = nil
		b, err := withID(u.GetBucketId(), rest)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out, nil
}

// withID encodes rest, a message whose field 1 is a BucketId left unset,
// with id as that field, written by hand.
func withID(id *rlqsv3.BucketId, rest proto.Message) ([]byte, error) {
	tail, err := proto.Marshal(rest)
	if err != nil {
		return nil, err
	}
	var b []byte
	if id != nil {
		var m []byte
		for k, v := range id.GetBucket() {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			m = protowire.AppendTag(m, 1, protowire.BytesType)
			m = protowire.AppendBytes(m, e)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return append(b, tail...), nil
}

// decodeResponse decodes a RateLimitQuotaResponse keeping the bucket ids'
// raw bytes; the rest of each action goes to the standard decoder.
func decodeResponse(b []byte, r *rlqsv3.RateLimitQuotaResponse) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		a := &rlqsv3.RateLimitQuotaResponse_BucketAction{}
		var id map[string]string
		var rest []byte
		err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if typ != protowire.BytesType {
				return nil
			}
			if num == 1 {
				if id == nil {
					id = map[string]string{}
				}
				return decodeBucketID(v, id)
			}
			rest = protowire.AppendTag(rest, num, typ)
			rest = protowire.AppendBytes(rest, v)
			return nil
		})
		if err == nil {
			err = proto.Unmarshal(rest, a)
		}
		if id != nil {
			a.BucketId = &rlqsv3.BucketId{Bucket: id}
		}
		r.BucketAction = append(r.BucketAction, a)
		return err
	})
}
