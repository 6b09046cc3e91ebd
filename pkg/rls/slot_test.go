package rls

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// slotToken is the slot token r hands out in its dynamic metadata, "" for
// none.
func slotToken(r *rlsv3.RateLimitResponse) string {
	return r.GetDynamicMetadata().GetFields()[ratelimit.SlotTokenKey].GetStringValue()
}

// withToken is d with the slot token entry that Envoy's release sends back.
func withToken(d *rlcommon.RateLimitDescriptor, token string) *rlcommon.RateLimitDescriptor {
	d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: ratelimit.SlotTokenKey, Value: token})
	return d
}

// TestSlotToken follows a concurrency limit of 2 as Envoy drives it: an
// admitted acquire hands out a slot token in its dynamic metadata (a
// denied one none); the release that Envoy sends for every request, denied
// ones included, frees a slot only with a live token, and only once.
func TestSlotToken(t *testing.T) {
	s, _ := newTestService(t, Options{})
	acquire := func() (string, string) {
		r := call(t, s, request(desc("inflight", "a")))
		return brief(r), slotToken(r)
	}
	releaseWith := func(token string) string {
		return brief(call(t, s, release(withToken(desc("inflight", "a"), token))))
	}
	b1, t1 := acquire()
	b2, t2 := acquire()
	b3, t3 := acquire()
	if b1 != "OK [OK:1]" || b2 != "OK [OK:0]" || b3 != "OVER_LIMIT [OVER:0]" || t1 == "" || t2 == "" || t1 == t2 || t3 != "" {
		t.Fatalf("acquires: %s %q, %s %q, %s %q; want two admitted with distinct tokens, the third denied without one", b1, t1, b2, t2, b3, t3)
	}
	// The denied request's release, one without the entry, and forged or
	// malformed tokens free nothing.
	for _, bad := range []string{"", "0", "007", "-1", "x", t1 + "0", "99999999999999999999"} {
		if got := releaseWith(bad); got != "OK [OK:0]" {
			t.Fatalf("release with token %q: %s, want nothing freed (OK [OK:0])", bad, got)
		}
	}
	if got := brief(call(t, s, release(desc("inflight", "a")))); got != "OK [OK:0]" {
		t.Fatalf("release without a token entry: %s, want nothing freed", got)
	}
	if got := releaseWith(t1); got != "OK [OK:1]" {
		t.Fatalf("release with the first acquire's token: %s, want its slot freed (OK [OK:1])", got)
	}
	if got := releaseWith(t1); got != "OK [OK:1]" {
		t.Fatalf("the same release again: %s, want nothing more freed", got)
	}
	if b, tok := acquire(); b != "OK [OK:0]" || tok == "" {
		t.Fatalf("acquire after the release: %s %q, want admitted with a token", b, tok)
	}
}

// TestSlotTokenJSON: /json hands out and takes back the slot token as
// gRPC does (a release is a refund: allowed with JSONHitsAddend).
func TestSlotTokenJSON(t *testing.T) {
	s, _ := newTestService(t, Options{JSONHitsAddend: true})
	h := s.JSONHandler()
	post := func(req *rlsv3.RateLimitRequest) (int, *rlsv3.RateLimitResponse) {
		t.Helper()
		body, err := protojson.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body)))
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("POST /json: %d %s: %v", w.Code, w.Body, err)
		}
		return w.Code, &resp
	}
	_, r1 := post(request(desc("inflight", "j")))
	post(request(desc("inflight", "j")))
	if code, _ := post(request(desc("inflight", "j"))); code != http.StatusTooManyRequests {
		t.Fatalf("third acquire: %d, want 429", code)
	}
	tok := slotToken(r1)
	if tok == "" {
		t.Fatalf("first acquire's response %v has no slot token", r1)
	}
	if code, r := post(release(withToken(desc("inflight", "j"), tok))); code != http.StatusOK || brief(r) != "OK [OK:1]" {
		t.Fatalf("release with the token: %d %s, want 200 OK [OK:1]", code, brief(r))
	}
	if code, _ := post(request(desc("inflight", "j"))); code != http.StatusOK {
		t.Fatalf("acquire after the release: %d, want 200", code)
	}
}
