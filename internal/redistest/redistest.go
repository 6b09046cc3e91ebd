// Package redistest starts real redis-server processes for tests: a shared
// standalone server (Addr), a shared 3-master Redis Cluster (Cluster), and
// private servers: one a test may stop and start again (Start), a Cluster
// whose nodes it may stop (StartCluster), a TLS-only one (StartTLS) and a
// master watched by a Sentinel (Sentinel).
//
// Servers listen on free loopback ports, never on fixed ones, keep no data on
// disk (--save "" --appendonly no), and die with the test binary. Tests that
// share a server must use their own key prefix (see Prefix) instead of
// FLUSHALL, so t.Parallel is safe. Nothing here skips: a missing redis-server
// fails the test with a one-line fix.
//
// The package speaks just enough RESP (Do) to wait for readiness; it does not
// import go-redis, which only pkg/redis imports.
package redistest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvAddr names the environment variable that points tests at an existing
// standalone Redis ("host:port") instead of a redis-server they start.
const EnvAddr = "RLS_TEST_REDIS_ADDR"

const notFound = "redis-server not found: run 'make test' (it installs it) or 'apt-get install redis-server'"

// startTimeout bounds how long a server may take to answer PING (or a cluster
// to reach cluster_state:ok); -race on 2 cores is slow.
const startTimeout = 20 * time.Second

var (
	shared struct {
		once sync.Once
		srv  *Server
		err  error
	}
	cluster struct {
		once  sync.Once
		nodes []*Server
		addrs []string
		err   error
	}
	// live holds every server started by this process, for Main to stop.
	live   sync.Map // *Server -> struct{}
	prefix atomic.Int64
)

// Main runs the tests of m and then stops every server this package started.
// Use it from TestMain: func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }.
// Without it the servers still die with the test binary (they are started
// with a parent-death signal), but their temporary directories stay behind.
func Main(m *testing.M) int {
	code := m.Run()
	live.Range(func(k, _ any) bool {
		k.(*Server).Close()
		return true
	})
	return code
}

// Addr returns the address of a standalone Redis for t: $RLS_TEST_REDIS_ADDR
// when it is set, else one redis-server per test binary, started on first use
// on a free loopback port. It fails t when redis-server is not on PATH or does
// not start.
func Addr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvAddr); a != "" {
		return a
	}
	shared.once.Do(func() {
		shared.srv, shared.err = newServer()
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv.Addr()
}

// Cluster returns the seed addresses of a 3-master Redis Cluster (no
// replicas) shared by the test binary and started on first use: three
// redis-server processes with --cluster-enabled yes, joined with
// 'redis-cli --cluster create ... --cluster-yes', ready once every node
// reports cluster_state:ok. It fails t when that does not happen.
func Cluster(t testing.TB) []string {
	t.Helper()
	cluster.once.Do(func() {
		cluster.nodes, cluster.addrs, cluster.err = newCluster()
	})
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return append([]string(nil), cluster.addrs...)
}

// StartCluster starts a private 3-master Redis Cluster (no replicas) for t,
// as Cluster does, and stops it in t.Cleanup. Unlike Cluster's, its nodes
// are t's to stop, pause and start again (to make a shard unreachable).
func StartCluster(t testing.TB) (nodes []*Server, addrs []string) {
	t.Helper()
	nodes, addrs, err := newCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	return nodes, addrs
}

// Start starts a private standalone redis-server for t and stops it in
// t.Cleanup. Unlike Addr it ignores $RLS_TEST_REDIS_ADDR, since a test that
// stops and restarts its server needs to own it.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := newServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartUnix starts a private redis-server that also listens on a unix
// socket (in its own temporary directory, mode 700), stops it in
// t.Cleanup, and returns it with the socket's path.
func StartUnix(t testing.TB) (srv *Server, socket string) {
	t.Helper()
	s, err := newServer("--unixsocket", "$DIR/redis.sock", "--unixsocketperm", "700")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, filepath.Join(s.dir, "redis.sock")
}

// SentinelMaster is the master name that Sentinel monitors.
const SentinelMaster = "sluicemaster"

// Sentinel starts a private master and one Sentinel (quorum 1) monitoring it
// as SentinelMaster, stops both in t.Cleanup, and returns the Sentinel's
// address and the master.
func Sentinel(t testing.TB) (sentinel string, master *Server) {
	t.Helper()
	master = Start(t)
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", SentinelMaster, master.port)
		s, err := startConf(ports[0], conf)
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(s.Close)
		deadline := time.Now().Add(startTimeout)
		for {
			r, err := Do(s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
			if a, ok := r.([]any); err == nil && ok && len(a) == 2 {
				return s.Addr(), master
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel %s does not know %s within %v: %v %v", s.Addr(), SentinelMaster, startTimeout, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal(last)
	return "", nil
}

// StartTLS starts a private redis-server that accepts only TLS (no client
// certificates required), with a fresh self-signed CA, and stops it in
// t.Cleanup. It returns the server and the CA's PEM file, for rediss:// URLs.
func StartTLS(t testing.TB) (srv *Server, caFile string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal(notFound)
	}
	dir := t.TempDir()
	caFile, certFile, keyFile, pool, err := writeCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		d, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{port: ports[0], dir: d, tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
			extra: []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
				"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"}}
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err != nil {
			_ = os.RemoveAll(d)
			last = err
			continue
		}
		live.Store(s, struct{}{})
		t.Cleanup(s.Close)
		return s, caFile
	}
	t.Fatal(last)
	return nil, ""
}

// writeCerts writes a self-signed CA and a server certificate for 127.0.0.1
// signed by it into dir.
func writeCerts(dir string) (caFile, certFile, keyFile string, pool *x509.CertPool, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", leafDER}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err = os.WriteFile(f.name, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return caFile, certFile, keyFile, pool, nil
}

// Prefix returns a key prefix unique within the test binary and across
// runs against the same Redis, built from name (use t.Name()).
func Prefix(name string) string {
	return fmt.Sprintf("t:%s:%d:%d:", strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(name),
		os.Getpid(), prefix.Add(1))
}

// Server is one redis-server process on a fixed loopback port. It can be
// stopped and started again on the same port, to test reconnection. Its
// methods are safe for concurrent use.
type Server struct {
	mu      sync.Mutex
	port    int
	dir     string
	conf    string      // a config file to start with, for Sentinel
	tls     *tls.Config // set for a TLS-only server: how to reach it
	extra   []string
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Stop kills the server and waits for it to exit. Its data is lost (there is
// no persistence). Stop on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Start starts a stopped server again on the same port and waits until it
// answers PING. It returns an error when the port was taken meanwhile or the
// server does not come up.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	return s.startLocked()
}

// Close stops the server for good and removes its directory.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if !s.stopped {
		s.stopped = true
		_ = os.RemoveAll(s.dir)
		live.Delete(s)
	}
}

func (s *Server) startLocked() error {
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	port := []string{"--port", strconv.Itoa(s.port)}
	if s.tls != nil {
		port = []string{"--port", "0", "--tls-port", strconv.Itoa(s.port)}
	}
	args = append(args, port...)
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--protected-mode", "no")
	args = append(args, s.extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan struct{})
	if err := startLocked(cmd, done); err != nil {
		return fmt.Errorf("start redis-server on port %d: %w", s.port, err)
	}
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := do(s.Addr(), s.tls, "PING"); err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, lastLines(string(log), 3))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopLocked()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v", s.port, startTimeout)
		}
	}
}

// starter is a goroutine locked to its OS thread for the life of the process:
// a child's Pdeathsig fires when the thread that forked it exits, so every
// redis-server is forked from this thread and dies only with the process.
var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  chan error
}

func startLocked(cmd *exec.Cmd, done chan struct{}) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must outlive the children
			for r := range starter.reqs {
				r.err <- r.cmd.Start()
				if r.cmd.Process != nil {
					go func(r startReq) { _ = r.cmd.Wait(); close(r.done) }(r)
				}
			}
		}()
	})
	r := startReq{cmd: cmd, done: done, err: make(chan error, 1)}
	starter.reqs <- r
	return <-r.err
}

// newServer starts a redis-server on a free port, trying other ports when the
// chosen one is taken before redis-server binds it.
func newServer(extra ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(notFound)
	}
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		s, err := startOn(ports[0], extra...)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func startOn(port int, extra ...string) (*Server, error) {
	return startConf(port, "", extra...)
}

// startConf starts a server on port; a non-empty conf is written to a config
// file that the server starts from in Sentinel mode.
func startConf(port int, conf string, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{port: port, dir: dir}
	if conf != "" {
		s.conf = filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	for _, a := range extra {
		s.extra = append(s.extra, strings.ReplaceAll(a, "$DIR", dir))
	}
	if err := s.startLocked(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	live.Store(s, struct{}{})
	return s, nil
}

func newCluster() ([]*Server, []string, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, nil, errors.New("redis-cli not found: run 'make test' (it installs it) or 'apt-get install redis-tools'")
	}
	var last error
	for range 3 {
		nodes, addrs, err := tryCluster()
		if err == nil {
			return nodes, addrs, nil
		}
		last = err
	}
	return nil, nil, last
}

func tryCluster() (nodes []*Server, addrs []string, err error) {
	defer func() {
		if err != nil {
			for _, n := range nodes {
				n.Close()
			}
		}
	}()
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, nil, errors.New(notFound)
	}
	ports, err := freePorts(6) // 3 client ports and 3 cluster bus ports
	if err != nil {
		return nil, nil, err
	}
	for i := range 3 {
		n, err := startOn(ports[i], "--cluster-enabled", "yes",
			"--cluster-config-file", "$DIR/nodes.conf",
			"--cluster-port", strconv.Itoa(ports[3+i]),
			"--cluster-node-timeout", "5000")
		if err != nil {
			return nodes, nil, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.Addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return nodes, nil, fmt.Errorf("redis-cli --cluster create %v: %w: %s", addrs, err, lastLines(string(out), 3))
	}
	deadline := time.Now().Add(startTimeout)
	for _, a := range addrs {
		for {
			info, err := Do(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info.(string), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return nodes, nil, fmt.Errorf("cluster node %s not ok within %v: %v %v", a, startTimeout, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes, addrs, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// redis-server has no "--port 0", so the port is picked here and a start that
// loses the race is retried by the caller.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p > 55535 { // the cluster bus would default to port+10000: keep it valid
			continue
		}
		ports = append(ports, p)
	}
	return ports, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Do sends one command to addr over a new connection and returns the reply:
// a string for simple and bulk strings, int64 for integers, nil for a null,
// []any for arrays, and an error for an error reply. It is for readiness
// checks and test setup, not for speed.
func Do(addr string, args ...string) (any, error) {
	return do(addr, nil, args...)
}

func do(addr string, tc *tls.Config, args ...string) (any, error) {
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply %q", line)
}
