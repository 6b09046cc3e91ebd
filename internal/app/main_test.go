package app

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMainServesUntilCanceled: Main runs the whole server in-process, with
// the arguments, environment and output it is given, until its context
// ends; then it shuts down and returns 0.
func TestMainServesUntilCanceled(t *testing.T) {
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--config", "../../config", "--grpc-addr", "127.0.0.1:0", "--http-addr", httpAddr, "--debug-addr", ""},
			[]string{"SLUICE_LOG_FORMAT=json", "GOGC=100"}, &out, &errOut)
	}()
	var err error
	if !waitUntil(10*time.Second, 20*time.Millisecond, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + httpAddr + "/readyz"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("/readyz not 200 within 10s (%v); stderr:\n%s", err, errOut.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("Main = %d after its context ended, want 0; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Main did not return within 15s of its context ending")
	}
	if log := errOut.String(); !strings.Contains(log, `"msg":"listening"`) || !strings.Contains(log, `"msg":"stopped"`) {
		t.Errorf("stderr lacks the listening and stopped lines:\n%s", log)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
