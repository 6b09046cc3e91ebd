package redistest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pause stops the server's process with SIGSTOP: it keeps its sockets, so
// clients connect and write but get no answer, as with a Redis that hangs.
// Resume undoes it. Pause fails t when the server is not running.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume continues a server stopped by Pause with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("redis-server on port %d is not running: cannot send %v", s.port, sig)
	}
	if err := syscall.Kill(s.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("send %v to redis-server on port %d: %v", sig, s.port, err)
	}
}

// FailoverSet is a master, one replica of it and three Sentinels (quorum 2)
// monitoring it as SentinelMaster, all on loopback, for failover tests.
type FailoverSet struct {
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// SentinelAddrs returns the three Sentinels' addresses.
func (f *FailoverSet) SentinelAddrs() []string {
	var a []string
	for _, s := range f.Sentinels {
		a = append(a, s.Addr())
	}
	return a
}

// Failover starts a FailoverSet and stops it in t.Cleanup. It returns once
// the replica is in sync and every Sentinel knows the replica and the two
// other Sentinels, so that killing the master leads to a failover: the
// Sentinels agree the master is down after down-after-milliseconds (1 s) and
// promote the replica, within failover-timeout (5 s).
func Failover(t testing.TB) *FailoverSet {
	t.Helper()
	f := &FailoverSet{Master: Start(t)}
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		r, err := startOn(ports[0], "--replicaof", "127.0.0.1", strconv.Itoa(f.Master.port))
		if err == nil {
			f.Replica = r
			t.Cleanup(r.Close)
			break
		}
		last = err
	}
	if f.Replica == nil {
		t.Fatal(last)
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, f.Master.port)
	for try := 0; len(f.Sentinels) < 3; try++ {
		if try == 10 {
			t.Fatal(last)
		}
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		s, err := startConf(ports[0], conf)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(s.Close)
		f.Sentinels = append(f.Sentinels, s)
	}
	if err := f.waitReady(startTimeout); err != nil {
		t.Fatal(err)
	}
	return f
}

// waitReady waits until the replica's link is up and every Sentinel sees one
// replica and two other Sentinels.
func (f *FailoverSet) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel set not ready within %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *FailoverSet) ready() error {
	info, err := Do(f.Replica.Addr(), "INFO", "replication")
	if err != nil {
		return err
	}
	if s, _ := info.(string); !strings.Contains(s, "master_link_status:up") {
		return fmt.Errorf("replica %s: link to master not up", f.Replica.Addr())
	}
	for _, s := range f.Sentinels {
		for _, q := range []struct {
			cmd  string
			want int
		}{{"REPLICAS", 1}, {"SENTINELS", 2}} {
			r, err := Do(s.Addr(), "SENTINEL", q.cmd, SentinelMaster)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
			}
			if a, _ := r.([]any); len(a) != q.want {
				return fmt.Errorf("sentinel %s knows %d %s, want %d", s.Addr(), len(a), strings.ToLower(q.cmd), q.want)
			}
		}
	}
	return nil
}

// MasterAddr returns the master address that a majority (2) of the Sentinels
// report, or an error when they do not agree.
func (f *FailoverSet) MasterAddr() (string, error) {
	votes := map[string]int{}
	for _, s := range f.Sentinels {
		r, err := Do(s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if err != nil {
			continue
		}
		if a, ok := r.([]any); ok && len(a) == 2 {
			host, _ := a[0].(string)
			port, _ := a[1].(string)
			votes[host+":"+port]++
		}
	}
	for a, n := range votes {
		if n >= 2 {
			return a, nil
		}
	}
	return "", errors.New("sentinels do not agree on a master")
}

// WaitPromoted waits until a majority of the Sentinels name the replica as
// the master and the replica reports role:master, and returns how long that
// took.
func (f *FailoverSet) WaitPromoted(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		a, err := f.MasterAddr()
		if err == nil && a == f.Replica.Addr() {
			info, err := Do(f.Replica.Addr(), "INFO", "replication")
			if s, _ := info.(string); err == nil && strings.Contains(s, "role:master") {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("replica %s not promoted within %v (sentinels say %q, %v)", f.Replica.Addr(), timeout, a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
