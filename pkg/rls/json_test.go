package rls

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestJSONAcceptsWhatGRPCAccepts: a body with unknown fields or entry values
// that are not UTF-8 is decided like the gRPC call, and distinct invalid
// values count in distinct counters.
func TestJSONAcceptsWhatGRPCAccepts(t *testing.T) {
	s, _ := newTestService(t, Options{})
	h := s.JSONHandler()
	post := func(body string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		out, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(out)
	}
	for _, tc := range []struct {
		name, body string
		code       int
		contains   string
	}{
		{"unknown field", `{"domain":"test","newer_field":1,"descriptors":[{"entries":[{"key":"api_key","value":"u"}]}]}`, 200, `"limitRemaining":2`},
		{"not UTF-8", "{\"domain\":\"test\",\"descriptors\":[{\"entries\":[{\"key\":\"api_key\",\"value\":\"a\xff\"}]}]}", 200, `"limitRemaining":2`},
		{"same bytes again", "{\"domain\":\"test\",\"descriptors\":[{\"entries\":[{\"key\":\"api_key\",\"value\":\"a\xff\"}]}]}", 200, `"limitRemaining":1`},
		{"other invalid bytes count apart", "{\"domain\":\"test\",\"descriptors\":[{\"entries\":[{\"key\":\"api_key\",\"value\":\"a\xfe\"}]}]}", 200, `"limitRemaining":2`},
		{"invalid byte outside a string", "{\"domain\":\"test\"\xff}", 400, "not a RateLimitRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.body)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Errorf("POST /json = %d %s, want %d containing %s", code, body, tc.code, tc.contains)
			}
		})
	}
}

// TestJSONRefusesUsageUnlessAllowed: by default /json refuses a refund and
// a hits_addend above 1 with 400 naming the field and the setting, and
// counts nothing for them; a check (0) and one hit are decided; with
// JSONHitsAddend both are decided as gRPC decides them.
func TestJSONRefusesUsageUnlessAllowed(t *testing.T) {
	handlers := map[bool]http.Handler{}
	for _, allow := range []bool{false, true} {
		s, _ := newTestService(t, Options{JSONHitsAddend: allow, JSONHitsAddendSetting: "--json-hits-addend"})
		handlers[allow] = s.JSONHandler()
	}
	const one = `{"domain":"test","descriptors":[{"entries":[{"key":"api_key","value":"%s"}]%s}]%s}`
	for _, tc := range []struct {
		name     string
		allow    bool
		body     string
		code     int
		contains string
	}{
		{"refund", false, fmt.Sprintf(one, "r", `,"is_negative_hits":true,"hits_addend":3`, ""), 400,
			"descriptors[0].is_negative_hits: /json refuses refunds and hits_addend above 1, since the HTTP port is reached by more than Envoy (--json-hits-addend allows them)"},
		{"descriptor hits_addend 2", false, fmt.Sprintf(one, "d", `,"hits_addend":2`, ""), 400, "descriptors[0].hits_addend 2: /json refuses"},
		{"request hits_addend 3", false, fmt.Sprintf(one, "q", "", `,"hits_addend":3`), 400, "hits_addend 3: /json refuses"},
		{"the counter refused ones left alone", false, fmt.Sprintf(one, "d", "", ""), 200, `"limitRemaining":2`},
		{"check", false, fmt.Sprintf(one, "c", `,"hits_addend":0`, ""), 200, `"limitRemaining":3`},
		{"one hit", false, fmt.Sprintf(one, "o", `,"hits_addend":1`, `,"hits_addend":1`), 200, `"limitRemaining":2`},
		{"allowed: two hits", true, fmt.Sprintf(one, "a", `,"hits_addend":2`, ""), 200, `"limitRemaining":1`},
		{"allowed: refund", true, fmt.Sprintf(one, "a", `,"is_negative_hits":true,"hits_addend":1`, ""), 200, `"limitRemaining":2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handlers[tc.allow].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(tc.body)))
			if body := rec.Body.String(); rec.Code != tc.code || !strings.Contains(body, tc.contains) {
				t.Errorf("POST /json %s = %d %s, want %d containing %s", tc.body, rec.Code, body, tc.code, tc.contains)
			}
		})
	}
}

// TestJSONCheckOnly: with JSONCheckOnly every /json request is decided as a
// check, whatever it asks (hits, a hits_addend, a refund): the answer says
// what the counter holds and nothing is counted.
func TestJSONCheckOnly(t *testing.T) {
	s, _ := newTestService(t, Options{JSONCheckOnly: true})
	h := s.JSONHandler()
	const one = `{"domain":"test","descriptors":[{"entries":[{"key":"api_key","value":"k"}]%s}]%s}`
	for _, body := range []string{fmt.Sprintf(one, "", ""), fmt.Sprintf(one, `,"hits_addend":2`, ""), fmt.Sprintf(one, "", `,"hits_addend":3`),
		fmt.Sprintf(one, `,"is_negative_hits":true,"hits_addend":3`, ""), fmt.Sprintf(one, "", "")} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		if got := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(got, `"limitRemaining":3`) {
			t.Errorf("POST /json %s = %d %s, want 200 with all 3 remaining (a check)", body, rec.Code, got)
		}
	}
}
