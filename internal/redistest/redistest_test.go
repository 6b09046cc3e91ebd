package redistest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func TestAddr(t *testing.T) {
	t.Parallel()
	a := redistest.Addr(t)
	if got, err := redistest.Do(a, "PING"); err != nil || got != "PONG" {
		t.Fatalf("PING %s = %v, %v, want PONG", a, got, err)
	}
	if b := redistest.Addr(t); b != a {
		t.Errorf("second Addr = %s, want the shared %s", b, a)
	}
}

func TestServerRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	if _, err := redistest.Do(s.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := redistest.Do(s.Addr(), "PING"); err == nil {
		t.Fatal("PING after Stop succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got, err := redistest.Do(s.Addr(), "GET", "k"); err != nil || got != nil {
		t.Errorf("GET k after restart = %v, %v, want nil (no persistence)", got, err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	if len(addrs) != 3 {
		t.Fatalf("Cluster returned %d addresses, want 3", len(addrs))
	}
	for _, a := range addrs {
		info, err := redistest.Do(a, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info.(string), "cluster_state:ok") {
			t.Errorf("CLUSTER INFO on %s = %v, %v", a, info, err)
		}
	}
}

func TestPrefixUnique(t *testing.T) {
	a, b := redistest.Prefix(t.Name()), redistest.Prefix(t.Name())
	if a == b || strings.ContainsAny(a, "{}") {
		t.Errorf("Prefix twice = %q, %q: want distinct and without braces", a, b)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	sentinel, master := redistest.Sentinel(t)
	r, err := redistest.Do(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", redistest.SentinelMaster)
	if err != nil {
		t.Fatal(err)
	}
	if a := r.([]any); a[0].(string)+":"+a[1].(string) != master.Addr() {
		t.Errorf("sentinel reports master %v, want %s", a, master.Addr())
	}
}
