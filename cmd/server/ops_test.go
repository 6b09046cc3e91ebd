package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestJSONNamesStoreError: when Redis refuses the connection, the /json 503
// says so, not "context deadline exceeded" (go-redis's background dial
// retries used to outlast the call's 15 ms budget and hide the dial error).
func TestJSONNamesStoreError(t *testing.T) {
	srv, _, _ := startServer(t, "--redis-url", "redis://127.0.0.1:1/0", "--ready-requires-store=false")
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
	for i := range 3 {
		resp, err := http.Post("http://"+srv.httpLn.Addr().String()+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(out), "connection refused") {
			t.Errorf("POST /json %d with Redis refusing: %d %q, want 503 naming \"connection refused\"", i, resp.StatusCode, out)
		}
	}
}
