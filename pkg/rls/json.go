package rls

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// MaxJSONBytes bounds the body of a POST /json request.
const MaxJSONBytes = 1 << 20

// jsonUnmarshal accepts what the gRPC codec accepts: unknown fields are
// ignored (as protobuf ignores unknown fields on the wire), so a newer
// Envoy's request still decodes.
var jsonUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// latin1Escape returns body with every byte that is not part of valid UTF-8
// written as the JSON escape of the same Latin-1 code point (0xff becomes
// \u00ff), so a value an end client filled with such bytes is decided
// rather than refused, deterministically, and distinct invalid values stay
// distinct. (The gRPC codec keeps such bytes exactly; here JSON cannot.) A
// byte outside a string leaves the body invalid JSON, refused as before.
// Valid bodies are returned unchanged.
func latin1Escape(body []byte) []byte {
	if utf8.Valid(body) {
		return body
	}
	out := make([]byte, 0, len(body)+16)
	for len(body) > 0 {
		r, n := utf8.DecodeRune(body)
		if r == utf8.RuneError && n == 1 {
			out = fmt.Appendf(out, `\u%04x`, body[0])
		} else {
			out = append(out, body[:n]...)
		}
		body = body[n:]
	}
	return out
}

// JSONHandler returns the HTTP twin of ShouldRateLimit, as envoyproxy/ratelimit
// serves it on /json: POST a RateLimitRequest in protojson, get the
// RateLimitResponse in protojson with status 200 (OK) or 429 (OVER_LIMIT),
// and the response_headers_to_add as HTTP headers.
// With Options.JSONCheckOnly every descriptor is decided as a check
// (hits_addend 0): nothing is counted.
// Errors: 405 for a method other than POST, 413 for a body over MaxJSONBytes,
// 400 for a body that is not a RateLimitRequest or is INVALID_ARGUMENT, or
// (unless Options.JSONHitsAddend or JSONCheckOnly) that refunds or sends a
// hits_addend above 1, 503
// when the store fails under FailureModeError; the body then holds the
// message as text.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "use POST with a RateLimitRequest in JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := jsonUnmarshal.Unmarshal(latin1Escape(body), &req); err != nil {
			http.Error(w, "request body is not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		if s.opts.JSONCheckOnly {
			for _, d := range req.GetDescriptors() {
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(0), false
			}
		} else if msg := s.jsonUsage(&req); msg != "" {
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			jsonError(w, err)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The headers Envoy would add go on the HTTP answer too (Retry-After,
		// RateLimit...), so a plain HTTP client sees what Envoy's would.
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() != "Content-Type" {
				w.Header().Add(h.GetKey(), h.GetValue())
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// jsonError answers a /json request that ShouldRateLimit failed with err:
// 400 for INVALID_ARGUMENT, 503 for UNAVAILABLE, 504 for a cancelled call
// or a passed deadline, 500 otherwise, the status's message as the body.
func jsonError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	case codes.Canceled, codes.DeadlineExceeded:
		code = http.StatusGatewayTimeout
	}
	http.Error(w, st.Message(), code)
}

// jsonUsage returns why /json refuses req, naming the field, when req
// refunds (is_negative_hits) or adds more than one hit and
// Options.JSONHitsAddend is off; "" when it may be decided. A hits_addend
// of 0 (a check) or 1 counts as a plain request does.
func (s *Service) jsonUsage(req *rlsv3.RateLimitRequest) string {
	if s.opts.JSONHitsAddend {
		return ""
	}
	field := ""
	if n := req.GetHitsAddend(); n > 1 {
		field = fmt.Sprintf("hits_addend %d", n)
	}
	for i, d := range req.GetDescriptors() {
		if field != "" {
			break
		}
		switch {
		case d.GetIsNegativeHits():
			field = fmt.Sprintf("descriptors[%d].is_negative_hits", i)
		case d.GetHitsAddend().GetValue() > 1:
			field = fmt.Sprintf("descriptors[%d].hits_addend %d", i, d.GetHitsAddend().GetValue())
		}
	}
	if field == "" {
		return ""
	}
	msg := field + ": /json refuses refunds and hits_addend above 1, since the HTTP port is reached by more than Envoy"
	if s.opts.JSONHitsAddendSetting != "" {
		msg += " (" + s.opts.JSONHitsAddendSetting + " allows them)"
	}
	return msg
}
