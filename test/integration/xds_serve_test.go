package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// xdsServeConfig is the descriptor file of MIGRATING's "try it before you
// roll it out", with requests_per_unit in place of %d.
const xdsServeConfig = `domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: %d
`

// TestXDSServe runs cmd/xds-serve on a directory of descriptor files with
// --tls-dir (certificates made there, mutual TLS as Envoy Gateway serves
// it) and the built Sluice in xDS mode against it with those
// certificates, as MIGRATING's "try it before you roll it out" does: the
// file's limit decides (2 a minute: OK, OK, OVER_LIMIT); an edit is served
// as the next version and decides; a broken edit is refused at its line,
// and the limit in force keeps deciding.
func TestXDSServe(t *testing.T) {
	dir, certs := t.TempDir(), filepath.Join(t.TempDir(), "certs")
	file := filepath.Join(dir, "api.yaml")
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(strings.Replace(xdsServeConfig, "%d", "2", 1))
	xds := startCmd(t, exec.Command(command(t, "xds-serve"), "--addr", "127.0.0.1:0", "--tls-dir", certs,
		"--interval", "50ms", "--log-format", "json", dir))
	s := startSluice(t, "--xds-server", xds.GRPCAddr, "--xds-node-id", "envoy-ratelimit",
		"--xds-tls-ca", filepath.Join(certs, "ca.crt"), "--xds-tls-cert", filepath.Join(certs, "tls.crt"),
		"--xds-tls-key", filepath.Join(certs, "tls.key"),
		"--redis-url", "redis://"+redistest.Addr(t)+"/0", "--redis-prefix", redistest.Prefix(t.Name()))
	first := waitLimit(t, s, xds, 2) // the first call that the file's limit decides
	got := []string{fmt.Sprint(first.GetOverallCode(), " ", first.GetStatuses()[0].GetLimitRemaining())}
	for range 2 {
		r := s.call(t, "api", []string{"remote_address", "10.0.0.1"})
		got = append(got, fmt.Sprint(r.GetOverallCode(), " ", r.GetStatuses()[0].GetLimitRemaining()))
	}
	if want := "OK 1, OK 0, OVER_LIMIT 0"; strings.Join(got, ", ") != want {
		t.Errorf("three calls on 2 a minute: %s, want %s", strings.Join(got, ", "), want)
	}

	write(strings.Replace(xdsServeConfig, "%d", "5", 1))
	waitLimit(t, s, xds, 5)
	if !strings.Contains(xds.Log(), `"version":2`) {
		t.Errorf("the edit was not served as version 2:\n%s", xds.Log())
	}

	write("domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 9\n")
	eventually(10*time.Second, 50*time.Millisecond, func() bool { return strings.Contains(xds.Log(), "config not served") })
	if want := "api.yaml:4:17: invalid YAML: this '{' is never closed"; !strings.Contains(xds.Log(), want) {
		t.Errorf("the broken edit's error does not say %q:\n%s", want, xds.Log())
	}
	if l := s.call(t, "api", []string{"remote_address", "10.0.0.9"}).GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 5 {
		t.Errorf("after a broken edit the limit is %v, want the one in force (5 a minute)", l)
	}
}

// waitLimit calls s until remote_address is limited to rpu a minute (the
// snapshot of that file is in force), for at most 10 s, and returns that
// call's response.
func waitLimit(t *testing.T, s, xds *sluice, rpu uint32) *rlsv3.RateLimitResponse {
	t.Helper()
	var resp *rlsv3.RateLimitResponse
	var err error
	if !eventually(10*time.Second, 50*time.Millisecond, func() bool {
		resp, err = s.Client.ShouldRateLimit(context.Background(), request("api", []string{"remote_address", "10.0.0.1"}))
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == rpu
	}) {
		t.Fatalf("no limit of %d a minute within 10 s (last: %v, %v)\nxds-serve:\n%s\nsluice:\n%s", rpu, resp, err, xds.Log(), s.Log())
	}
	return resp
}
