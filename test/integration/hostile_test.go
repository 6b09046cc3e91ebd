package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rawCodec sends a request that is already protobuf wire bytes (*[]byte) as
// it is, and decodes the response with the standard proto decoder, so a test
// can put bytes on the wire that Go's protobuf refuses to marshal (strings
// that are not UTF-8), as Envoy does.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// rawRequest writes a RateLimitRequest by hand: domain (field 1) and one
// descriptor (field 2) per key, value list, each entry (descriptor field 1)
// a key (1) and a value (2), bytes exactly as given.
func rawRequest(domain string, descs ...[]string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, kv := range descs {
		var d []byte
		for i := 0; i+1 < len(kv); i += 2 {
			e := protowire.AppendTag(nil, 1, protowire.BytesType)
			e = protowire.AppendString(e, kv[i])
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, kv[i+1])
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// callRaw sends wire bytes as a ShouldRateLimit request.
func (s *sluice) callRaw(t *testing.T, req []byte) *rlsv3.RateLimitResponse {
	t.Helper()
	resp := &rlsv3.RateLimitResponse{}
	if err := s.Conn.Invoke(context.Background(), shouldRateLimit, &req, resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		t.Fatalf("ShouldRateLimit(raw %q): %v", trim(string(req)), err)
	}
	return resp
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func descString(descs [][]string) string {
	var b strings.Builder
	for _, d := range descs {
		b.WriteString("[")
		for i := 0; i+1 < len(d); i += 2 {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(d[i] + "=" + trim(strings.ToValidUTF8(d[i+1], "\\x??")))
		}
		b.WriteString("]")
	}
	return b.String()
}

// wantRemaining requires one OK status with remaining r for a single
// descriptor response.
func wantRemaining(t *testing.T, what string, resp *rlsv3.RateLimitResponse, r uint32) {
	t.Helper()
	st := resp.GetStatuses()
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(st) != 1 || st[0].GetCode() != rlsv3.RateLimitResponse_OK ||
		st[0].GetCurrentLimit() == nil || st[0].GetLimitRemaining() != r {
		t.Errorf("%s = %v, want OK with a limit and remaining %d", what, resp, r)
	}
}

// TestHostileRequests sends what a broken Envoy config or a hostile end
// client can put in a request to the built binary, and checks each answer:
// a named INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for size) that touches no
// counter for what Envoy's config shapes, and a correct decision counted in
// its own counter for what the end client controls (entry values, however
// long, whatever their bytes, however built to collide) and for hits_addend
// at the top of its range.
func TestHostileRequests(t *testing.T) {
	s := startSluice(t, "--config", "test/integration/testdata/hostile",
		"--redis-url", "redis://"+redistest.Addr(t)+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "2s", "--max-request-bytes", "3145728")
	touch := []string{"v", "touch"}

	t.Run("config-controlled shape is a named error and touches no counter", func(t *testing.T) {
		many := make([][]string, 10000)
		for i := range many {
			many[i] = touch
		}
		var wide []string
		for i := range 33 {
			wide = append(wide, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), "x")
		}
		for _, tc := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
			code codes.Code
			msg  string // the field named in the message
		}{
			{"empty domain", request("", touch), codes.InvalidArgument, "domain: must not be empty"},
			{"no descriptors", request("hostile"), codes.InvalidArgument, "descriptors: must not be empty"},
			{"descriptor without entries", request("hostile", touch, []string{}), codes.InvalidArgument, "descriptors[1].entries: must not be empty"},
			{"empty key", request("hostile", touch, []string{"", "x"}), codes.InvalidArgument, "descriptors[1].entries[0].key: must not be empty"},
			{"10k descriptors", request("hostile", many...), codes.InvalidArgument, "descriptors: 10000 descriptors, more than the limit of 64"},
			{"entries over --max-entries", request("hostile", touch, wide), codes.InvalidArgument, "descriptors[1].entries: 33 entries, more than the limit of 32"},
			{"key over --max-key-bytes", request("hostile", touch, []string{strings.Repeat("k", 257), "x"}), codes.InvalidArgument,
				"descriptors[1].entries[0].key: 257 bytes, more than the limit of 256"},
			{"request over --max-request-bytes", request("hostile", touch, []string{"v", strings.Repeat("x", 4<<20)}), codes.ResourceExhausted, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, err := s.Client.ShouldRateLimit(context.Background(), tc.req)
				if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
					t.Fatalf("ShouldRateLimit = %v, %v; want %v naming %q", resp, err, tc.code, tc.msg)
				}
			})
		}
		// At the limits, not over them: accepted (no rule matches: OK, no limit).
		resp := s.call(t, "hostile", wide[:64], []string{strings.Repeat("k", 256), "x"})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("32 entries and a 256-byte key: %v, want OK", resp)
		}
		// None of the refused requests counted [v=touch].
		wantRemaining(t, "[v=touch] after the refused requests", s.call(t, "hostile", touch), 4)
	})

	t.Run("client-controlled values count in their own counters", func(t *testing.T) {
		mib := strings.Repeat("x", 1<<20-1)
		// Every descriptor here must have a counter of its own: a key
		// built by naive joining ("domain_key_value_key_value", a '|' or ':'
		// separator, URL escaping, a Cluster hash tag) would merge some.
		distinct := [][]string{
			{"v", "a"}, {"v", "a_"}, {"v", ""}, {"v", " "},
			{"v", "{a}"}, {"v", "{a"}, {"v", "a}"}, {"v", "}{"},
			{"v", "a|b"}, {"v", "a:b"}, {"v", "a%b"}, {"v", "a%7Cb"}, {"v", "a%3Ab"}, {"v", "a=b"},
			{"v", "ü"}, {"v", "u\u0308"}, // NFC and NFD of the same text: different bytes
			{"v", strings.Repeat("x", 128)}, {"v", strings.Repeat("x", 129)}, // either side of hashing
			{"v", mib + "a"}, {"v", mib + "b"}, // 1 MiB, differing in the last byte
			{"a", "x_b_y"}, {"a", "x", "b", "y"}, {"a", "x|b|y"}, {"a", "x:b:y"}, {"a", "x", "b", "y|"}, {"a", "x|", "b", "y"},
			{"api_key", "a_route_search"}, {"api_key", "a", "route", "search"}, {"api_key", "a_route", "route", "search"},
			{"api_key", "a", "route", "_search"},
		}
		for pass, want := range []uint32{4, 3} {
			for _, d := range distinct {
				wantRemaining(t, "pass "+string(rune('1'+pass))+" "+descString([][]string{d}), s.call(t, "hostile", d), want)
			}
		}
	})

	t.Run("invalid UTF-8 written on the wire is decided and counted apart", func(t *testing.T) {
		vals := []string{"\xff\xfe", "\xff\xfd", "a\x80b", "a\xc3b", strings.Repeat("\xff", 200) + "\xfe", strings.Repeat("\xff", 200) + "\xfd", "valid"}
		for pass, want := range []uint32{4, 3} {
			for _, v := range vals {
				resp := s.callRaw(t, rawRequest("hostile", []string{"v", v}))
				wantRemaining(t, "pass "+string(rune('1'+pass))+" raw [v="+strings.ToValidUTF8(trim(v), "?")+"]", resp, want)
			}
		}
		// The raw path and the standard one agree on a valid value.
		wantRemaining(t, "[v=valid] sent by the standard client", s.call(t, "hostile", []string{"v", "valid"}), 2)
	})

	t.Run("hits_addend at the top of its range is over the limit and consumes nothing", func(t *testing.T) {
		req := request("hostile", []string{"v", "max32"})
		req.HitsAddend = math.MaxUint32
		huge64 := func(d []string) *rlcommon.RateLimitDescriptor {
			r := request("hostile", d).Descriptors[0]
			r.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
			return r
		}
		req64 := &rlsv3.RateLimitRequest{Domain: "hostile", Descriptors: []*rlcommon.RateLimitDescriptor{huge64([]string{"v", "max64"})}}
		// All or nothing: the huge descriptor's denial keeps its neighbour's hit.
		mixed := &rlsv3.RateLimitRequest{Domain: "hostile", Descriptors: []*rlcommon.RateLimitDescriptor{
			request("hostile", []string{"v", "neighbour"}).Descriptors[0], huge64([]string{"v", "max64-mixed"})}}
		for _, tc := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
			over []bool // per descriptor: OVER_LIMIT
		}{
			{"request hits_addend max uint32", req, []bool{true}},
			{"descriptor hits_addend max uint64", req64, []bool{true}},
			{"max uint64 beside a normal descriptor", mixed, []bool{false, true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for range 2 { // twice: a denial must not count either
					resp, err := s.Client.ShouldRateLimit(context.Background(), tc.req)
					if err != nil {
						t.Fatalf("ShouldRateLimit: %v", err)
					}
					if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.GetStatuses()) != len(tc.over) {
						t.Fatalf("ShouldRateLimit = %v, want OVER_LIMIT", resp)
					}
					for i, st := range resp.GetStatuses() {
						if (st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT) != tc.over[i] || st.GetLimitRemaining() > 5 {
							t.Errorf("status %d = %v, want over %v and remaining within the limit", i, st, tc.over[i])
						}
					}
				}
				for _, d := range tc.req.GetDescriptors() {
					kv := []string{d.GetEntries()[0].GetKey(), d.GetEntries()[0].GetValue()}
					wantRemaining(t, descString([][]string{kv})+" after the huge hits", s.call(t, "hostile", kv), 4)
				}
			})
		}
	})
}

// TestDeadlineShorterThanStoreTimeout runs sluice with a 1 s store timeout
// against a Redis that hangs (SIGSTOP), and checks that a caller's shorter
// gRPC deadline wins: a call sent to Redis is answered DEADLINE_EXCEEDED at
// that deadline (the server gives up then, its own latency metric says so),
// or by the domain's failure mode (allow) a margin before it (50 ms: 5 ms),
// never by the failure mode late. Once the store knows
// Redis stalled, calls are not sent at all: the failure
// mode answers them at once, well before their deadline.
func TestDeadlineShorterThanStoreTimeout(t *testing.T) {
	srv := redistest.Start(t)
	s := startSluice(t, "--config", "test/integration/testdata/chaos",
		"--redis-url", "redis://"+srv.Addr()+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "1s")
	s.call(t, "chaos_allow", []string{"probe", "warm"}) // connections open, script loaded

	// A healthy store and a 1 ms deadline: DEADLINE_EXCEEDED or a timely OK.
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.Client.ShouldRateLimit(ctx, request("chaos_allow", []string{"load", "deadline"}))
		cancel()
		if c := status.Code(err); c != codes.OK && c != codes.DeadlineExceeded {
			t.Fatalf("1 ms deadline: %v, want DeadlineExceeded (or OK in time)", err)
		}
	}

	srv.Pause(t)
	defer srv.Resume(t)
	before := metrics(t, s)
	const n = 10
	var atOnce int // failure mode answers, each before its call's deadline
	var late int   // calls the client saw end at their deadline
	for _, d := range []time.Duration{time.Millisecond, 50 * time.Millisecond} {
		got := map[codes.Code]int{}
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := time.Now()
			resp, err := s.Client.ShouldRateLimit(ctx, request("chaos_allow", []string{"load", "deadline"}))
			took := time.Since(start)
			cancel()
			got[status.Code(err)]++
			switch {
			case status.Code(err) == codes.DeadlineExceeded:
				late++
			case err == nil && resp.GetStatuses()[0].GetLimitRemaining() == 0 && took < d:
				atOnce++ // the failure mode (allow), before the deadline
			default:
				t.Errorf("deadline %v with Redis hanging: %v, %v after %v; want DeadlineExceeded, or the failure mode's OK before the deadline", d, resp, err, took)
			}
			if took > d+500*time.Millisecond {
				t.Errorf("deadline %v: answered after %v", d, took)
			}
		}
		t.Logf("deadline %v with Redis hanging: %v", d, got)
	}
	// The server sees a caller's deadline pass as DeadlineExceeded, or as
	// Canceled when the client's RST_STREAM arrives first. It finishes the
	// calls it got after their callers left: read its metrics until it has
	// counted them all, for up to 5 s, rather than for a fixed time.
	var count, sum float64
	var after map[string]float64
	for end := time.Now().Add(5 * time.Second); ; {
		after = metrics(t, s)
		count, sum = 0, 0
		for _, c := range []string{"DeadlineExceeded", "Canceled"} {
			count += after[`sluice_request_duration_seconds_count{code="`+c+`"}`] - before[`sluice_request_duration_seconds_count{code="`+c+`"}`]
			sum += after[`sluice_request_duration_seconds_sum{code="`+c+`"}`] - before[`sluice_request_duration_seconds_sum{code="`+c+`"}`]
		}
		if count+float64(atOnce) >= n || time.Now().After(end) {
			break
		}
	}
	t.Logf("server: %v calls ended by the caller's deadline, mean %.1f ms; %d answered at once by the failure mode", count, 1000*sum/max(count, 1), atOnce)
	if count+float64(atOnce) < n { // the 50 ms calls at least reach the server
		t.Errorf("server ended %v calls by the caller's deadline and answered %d at once, want at least %d in all", count, atOnce, n)
	}
	if count > 0 && sum/count > 0.25 {
		t.Errorf("server took %.0f ms on average before giving up, want the caller's deadline (<= 50 ms), not the 1 s store timeout", 1000*sum/count)
	}
	// The server answers by the failure mode only before the caller's
	// deadline (a margin before it): such an answer may still reach a
	// client on a loaded host after its deadline, which then sees
	// DeadlineExceeded (a 1 ms call answered at once by the failure mode
	// can arrive after 1 ms), so the calls seen late bound the difference.
	if a, b := failureAnswers(after, "chaos_allow", "allow"), failureAnswers(before, "chaos_allow", "allow"); int(a-b) < atOnce || int(a-b) > atOnce+late {
		t.Errorf("failure mode answered %v times, want %d to %d (those at once, and those the server sent before a deadline the client saw pass)", a-b, atOnce, atOnce+late)
	}
}

// TestSlowHTTPClientsAreCut: connections that send a request's body slowly
// (or not at all) are closed after --http-read-timeout, so they cannot hold
// the HTTP listener's goroutines and sockets (1000 such connections were
// once held 20 s).
func TestSlowHTTPClientsAreCut(t *testing.T) {
	s := startSluice(t, "--config", "config", "--http-read-timeout", "300ms")
	const n = 200
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", s.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		conns = append(conns, c)
	}
	deadline := time.Now().Add(3 * time.Second)
	closed := 0
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, c); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++ // EOF (io.Copy returns nil) or a reset: the server closed it
		}
	}
	if closed != n {
		t.Errorf("%d of %d slow-body connections closed within 3 s, want all (read timeout 300 ms)", closed, n)
	}
}
