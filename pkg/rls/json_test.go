package rls

import (
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
