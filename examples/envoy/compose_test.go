package envoy_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"gopkg.in/yaml.v3"
)

// repoRoot is where docker-compose.yml, the Dockerfile and the build context
// are, relative to this package.
const repoRoot = "../.."

// Sluice's defaults (cmd/server): the ports the image listens on unless
// SLUICE_HTTP_ADDR or SLUICE_GRPC_ADDR say otherwise.
const (
	defaultHTTPPort = 8080
	defaultGRPCPort = 8081
)

// compose is the part of docker-compose.yml these tests read.
type compose struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image       string    `yaml:"image"`
	Build       build     `yaml:"build"`
	Command     stringsOr `yaml:"command"`
	Environment envMap    `yaml:"environment"`
	Volumes     []string  `yaml:"volumes"`
	Ports       []string  `yaml:"ports"`
	DependsOn   dependsOn `yaml:"depends_on"`
}

// build is "build: DIR" or "build: {context: DIR, dockerfile: FILE}".
type build struct{ Context, Dockerfile string }

func (b *build) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	var v struct{ Context, Dockerfile string }
	if err := n.Decode(&v); err != nil {
		return err
	}
	*b = build(v)
	return nil
}

// stringsOr is a list of strings, or one string split on spaces.
type stringsOr []string

func (s *stringsOr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	var v []string
	err := n.Decode(&v)
	*s = v
	return err
}

// envMap is "environment:" as a map or as a list of NAME=value.
type envMap map[string]string

func (e *envMap) UnmarshalYAML(n *yaml.Node) error {
	*e = envMap{}
	if n.Kind == yaml.SequenceNode {
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			(*e)[k] = v
		}
		return nil
	}
	var m map[string]string
	err := n.Decode(&m)
	for k, v := range m {
		(*e)[k] = v
	}
	return err
}

// dependsOn is "depends_on:" as a list or as a map of service to condition.
type dependsOn []string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var l []string
		err := n.Decode(&l)
		*d = l
		return err
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k := range m {
		*d = append(*d, k)
	}
	slices.Sort(*d)
	return nil
}

// containerPorts returns the container side of each "ports:" entry
// ("8080", "8080:8080", "127.0.0.1:9901:9901", "8081:8081/tcp"), and
// reports an entry that publishes a container port on a different host
// port: the README's commands use the same number on both sides.
func (s service) containerPorts(t *testing.T) []int {
	t.Helper()
	var out []int
	for _, p := range s.Ports {
		p, _, _ = strings.Cut(p, "/")
		parts := strings.Split(p, ":")
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			t.Errorf("ports: %q: container port is not a number", p)
			continue
		}
		if len(parts) >= 2 && parts[len(parts)-2] != parts[len(parts)-1] {
			t.Errorf("ports: %q: publish container port %d as host port %d, as the README assumes", p, n, n)
		}
		out = append(out, n)
	}
	return out
}

// bindMounts returns the host path and container path of every bind mount
// ("./config:/etc/sluice/config:ro"); named volumes are left out.
func (s service) bindMounts() map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !(strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/")) {
			continue
		}
		out[parts[0]] = parts[1]
	}
	return out
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	var c compose
	if err := yaml.Unmarshal(readFile(t, filepath.Join(repoRoot, "docker-compose.yml")), &c); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	return c
}

// pinned reports whether image names a fixed version: a digest, or a tag
// other than "latest" (or a floating "-latest" like envoy's v1.38-latest).
func pinned(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return false // no tag means latest
	}
	tag := image[i+1:]
	return tag != "" && tag != "latest" && !strings.HasSuffix(tag, "-latest")
}

// portOf returns the port of a listen address such as ":8081"; def when
// addr is empty.
func portOf(t *testing.T, addr string, def int) int {
	t.Helper()
	if addr == "" {
		return def
	}
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("listen address %q has no port", addr)
	}
	return n
}

// clusterAddress returns the first endpoint address and port of a cluster.
func clusterAddress(c *clusterv3.Cluster) (string, int) {
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			return sa.GetAddress(), int(sa.GetPortValue())
		}
	}
	return "", 0
}

// TestCompose checks docker-compose.yml against the files it uses, Sluice's
// settings and examples/envoy/envoy.yaml, so that `docker compose up` does
// not fail on a missing file, a port nobody listens on, or a host name that
// no service has. (There is no Docker engine here to run it.)
func TestCompose(t *testing.T) {
	c := loadCompose(t)
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))

	for _, name := range []string{"redis", "sluice", "envoy", "upstream"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose.yml: no service %q", name)
		}
	}

	t.Run("files and images", func(t *testing.T) {
		for name, s := range c.Services {
			switch {
			case s.Image != "" && !pinned(s.Image):
				t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
			case s.Image == "" && s.Build.Context == "":
				t.Errorf("service %s: neither image nor build", name)
			}
			if s.Build.Context != "" {
				dockerfile := cmp.Or(s.Build.Dockerfile, "Dockerfile")
				mustExist(t, "service "+name+": build context", filepath.Join(repoRoot, s.Build.Context))
				mustExist(t, "service "+name+": build dockerfile", filepath.Join(repoRoot, s.Build.Context, dockerfile))
			}
			for host := range s.bindMounts() {
				mustExist(t, "service "+name+": volume", filepath.Join(repoRoot, host))
			}
			for _, d := range s.DependsOn {
				if _, ok := c.Services[d]; !ok {
					t.Errorf("service %s: depends_on %q, which is no service", name, d)
				}
			}
		}
	})

	t.Run("sluice", func(t *testing.T) {
		s := c.Services["sluice"]
		if s.Build.Context == "" || filepath.Clean(s.Build.Context) != "." {
			t.Errorf("sluice: build context = %q, want the repository root (.)", s.Build.Context)
		}
		env := map[string]string{}
		for k, v := range df.env {
			env[k] = v
		}
		for k, v := range s.Environment {
			env[k] = v
		}
		httpPort := portOf(t, env["SLUICE_HTTP_ADDR"], defaultHTTPPort)
		grpcPort := portOf(t, env["SLUICE_GRPC_ADDR"], defaultGRPCPort)
		ports := s.containerPorts(t)
		for _, p := range []int{httpPort, grpcPort} {
			if !slices.Contains(ports, p) {
				t.Errorf("sluice: ports %v do not publish container port %d", s.Ports, p)
			}
			if !slices.Contains(df.expose, p) {
				t.Errorf("Dockerfile: EXPOSE %v lacks %d", df.expose, p)
			}
		}

		// Envoy reaches Sluice by service name on its gRPC port.
		cluster := clusterNamed(b, rateLimitCluster(t, b))
		if cluster == nil {
			t.Fatal("envoy.yaml: the rate limit service cluster is missing")
		}
		host, port := clusterAddress(cluster)
		if host != "sluice" || port != grpcPort {
			t.Errorf("envoy.yaml: cluster %s at %s:%d, want sluice:%d (the compose service and Sluice's gRPC port)", cluster.GetName(), host, port, grpcPort)
		}

		// The mounted config is the config Sluice reads.
		cfg := env["SLUICE_CONFIG"]
		mounts := s.bindMounts()
		if got := mounts["./config"]; got == "" || got != cfg {
			t.Errorf("sluice: ./config is mounted at %q, SLUICE_CONFIG = %q; want the same path", got, cfg)
		}

		// The Redis URL names a service.
		u, err := url.Parse(env["SLUICE_REDIS_URL"])
		if err != nil || u.Hostname() == "" {
			t.Fatalf("sluice: SLUICE_REDIS_URL = %q, want redis://SERVICE:6379/0", env["SLUICE_REDIS_URL"])
		}
		if _, ok := c.Services[u.Hostname()]; !ok {
			t.Errorf("sluice: SLUICE_REDIS_URL host %q is no service", u.Hostname())
		}
		if !slices.Contains(s.DependsOn, u.Hostname()) {
			t.Errorf("sluice: does not depend on %s", u.Hostname())
		}
	})

	t.Run("envoy", func(t *testing.T) {
		s := c.Services["envoy"]
		if !strings.HasPrefix(s.Image, "envoyproxy/envoy:") {
			t.Errorf("envoy: image %q, want an official envoyproxy/envoy image", s.Image)
		}
		// The bootstrap Envoy loads is the file envoy_test.go validates.
		configPath := "/etc/envoy/envoy.yaml" // the image's default
		if i := slices.Index(s.Command, "-c"); i >= 0 && i+1 < len(s.Command) {
			configPath = s.Command[i+1]
		}
		if got := s.bindMounts()["./examples/envoy/envoy.yaml"]; got != configPath {
			t.Errorf("envoy: examples/envoy/envoy.yaml is mounted at %q, Envoy reads %q", got, configPath)
		}
		ports := s.containerPorts(t)
		want := []int{int(b.GetAdmin().GetAddress().GetSocketAddress().GetPortValue())}
		for _, l := range b.GetStaticResources().GetListeners() {
			want = append(want, int(l.GetAddress().GetSocketAddress().GetPortValue()))
		}
		for _, p := range want {
			if !slices.Contains(ports, p) {
				t.Errorf("envoy: ports %v do not publish port %d of envoy.yaml", s.Ports, p)
			}
		}
	})

	t.Run("redis evicts when full", func(t *testing.T) { checkRedisEvicts(t, c.Services["redis"]) })

	t.Run("every envoy cluster is a service", func(t *testing.T) {
		for _, cl := range b.GetStaticResources().GetClusters() {
			host, port := clusterAddress(cl)
			s, ok := c.Services[host]
			if !ok {
				t.Errorf("envoy.yaml: cluster %s points at %q, which is no compose service", cl.GetName(), host)
				continue
			}
			if !slices.Contains(c.Services["envoy"].DependsOn, host) {
				t.Errorf("envoy: does not depend on %s (cluster %s)", host, cl.GetName())
			}
			if host == "sluice" {
				continue // checked against Sluice's settings above
			}
			// A third-party server: its command must say it listens there.
			if !slices.ContainsFunc(s.Command, func(a string) bool { return strings.HasSuffix(a, ":"+strconv.Itoa(port)) }) {
				t.Errorf("service %s: command %q does not listen on :%d, where envoy.yaml's cluster %s sends", host, s.Command, port, cl.GetName())
			}
		}
	})
}

// checkRedisEvicts checks that the compose file's Redis caps its memory
// and evicts when full: with Redis's default policy, noeviction, a full
// Redis refuses every write, so a flood of distinct values fails every
// decision. Every Sluice key has a TTL.
func checkRedisEvicts(t *testing.T, s service) {
	t.Helper()
	flag := func(name string) string {
		if i := slices.Index(s.Command, "--"+name); i >= 0 && i+1 < len(s.Command) {
			return s.Command[i+1]
		}
		return ""
	}
	if p := flag("maxmemory-policy"); p != "allkeys-lru" && p != "volatile-lru" {
		t.Errorf("redis: --maxmemory-policy %q, want allkeys-lru or volatile-lru (every Sluice key has a TTL)", p)
	}
	if m := flag("maxmemory"); m == "" || m == "0" {
		t.Errorf("redis: --maxmemory %q, want a cap such as 256mb", m)
	}
}

func mustExist(t *testing.T, what, p string) {
	t.Helper()
	if _, err := os.Stat(p); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// rateLimitCluster returns the cluster the rate limit filter calls.
func rateLimitCluster(t *testing.T, b *bootstrapv3.Bootstrap) string {
	t.Helper()
	rls, errs := rateLimitFilters(b)
	if len(errs) > 0 || len(rls) == 0 {
		t.Fatalf("envoy.yaml: no rate limit filter: %v", errs)
	}
	return rls[0].filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
}

func clusterNamed(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// dockerfile is what TestDockerfile and TestCompose read from a Dockerfile.
type dockerfile struct {
	stages []stage
	// env and expose are the final stage's ENV and EXPOSE.
	env    map[string]string
	expose []int
}

type stage struct {
	from, name  string
	user        string
	workdir     string
	entrypoint  []string
	runs        []string
	copies      []copyInstr
	copiedPaths []string // destinations in the image
}

type copyInstr struct {
	from string // --from=STAGE, "" for the build context
	srcs []string
	dest string
	line int
}

// parseDockerfile reads the instructions the tests need; continuation
// lines are joined and comments dropped.
func parseDockerfile(t *testing.T, name string) dockerfile {
	t.Helper()
	df := dockerfile{env: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, name)))
	var cur *stage
	lineNo, start := 0, 0
	var pending string
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if pending == "" {
			start = lineNo
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, pending = pending+line, ""
		instr, args, _ := strings.Cut(line, " ")
		args = strings.TrimSpace(args)
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			df.stages = append(df.stages, st)
			cur = &df.stages[len(df.stages)-1]
			df.env, df.expose = map[string]string{}, nil
			continue
		}
		if cur == nil {
			if instr == "ARG" {
				continue // a global build argument (Docker allows ARG before the first FROM)
			}
			t.Fatalf("%s:%d: %s before FROM", name, start, instr)
		}
		switch instr {
		case "USER":
			cur.user = args
		case "WORKDIR":
			cur.workdir = args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(args), &cur.entrypoint); err != nil {
				t.Errorf("%s:%d: ENTRYPOINT is not in exec form: %v", name, start, err)
			}
		case "RUN":
			cur.runs = append(cur.runs, args)
		case "ENV":
			for _, kv := range strings.Fields(args) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Errorf("%s:%d: use ENV NAME=value", name, start)
				}
				df.env[k] = strings.Trim(v, `"`)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(args) {
				p, _, _ = strings.Cut(p, "/")
				n, err := strconv.Atoi(p)
				if err != nil {
					t.Errorf("%s:%d: EXPOSE %q", name, start, p)
				}
				df.expose = append(df.expose, n)
			}
		case "COPY", "ADD":
			ci := copyInstr{line: start}
			var rest []string
			for _, f := range strings.Fields(args) {
				switch {
				case strings.HasPrefix(f, "--from="):
					ci.from = strings.TrimPrefix(f, "--from=")
				case strings.HasPrefix(f, "--"):
				default:
					rest = append(rest, f)
				}
			}
			if len(rest) < 2 {
				t.Errorf("%s:%d: %s needs a source and a destination", name, start, instr)
				continue
			}
			ci.srcs, ci.dest = rest[:len(rest)-1], rest[len(rest)-1]
			cur.copies = append(cur.copies, ci)
			cur.copiedPaths = append(cur.copiedPaths, ci.dest)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(df.stages) == 0 {
		t.Fatalf("%s: no FROM", name)
	}
	return df
}

// dockerignore is a .dockerignore: patterns relative to the context root,
// the last matching pattern deciding, "!" re-including.
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(t *testing.T, name string) dockerignore {
	t.Helper()
	var di dockerignore
	for _, line := range strings.Split(string(readFile(t, name)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		line = path.Clean(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/"))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		di = append(di, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(re.String()), neg})
	}
	return di
}

// excluded reports whether rel (slash-separated, relative to the context)
// is left out of the build context: it or a directory above it matches.
func (di dockerignore) excluded(rel string) bool {
	rel = path.Clean(rel)
	parts := strings.Split(rel, "/")
	out := false
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		for _, pat := range di {
			if pat.re.MatchString(p) {
				out = !pat.negate
			}
		}
	}
	return out
}

// TestDockerfile checks that the image builds from files that exist and
// that .dockerignore keeps in the context, that it builds ./cmd/server as
// a static binary, and that the final image runs it as a non-root user.
func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	di := parseDockerignore(t, filepath.Join(repoRoot, ".dockerignore"))
	final := df.stages[len(df.stages)-1]

	t.Run("images pinned", func(t *testing.T) {
		names := map[string]bool{}
		for _, st := range df.stages {
			if !names[st.from] && !pinned(st.from) {
				t.Errorf("FROM %s: not pinned to a version", st.from)
			}
			names[st.name] = true
		}
		if len(df.stages) < 2 || strings.HasPrefix(final.from, "golang") {
			t.Errorf("final stage FROM %s: want a multi-stage build with a small runtime image", final.from)
		}
	})

	t.Run("context files exist and are not ignored", func(t *testing.T) {
		for _, st := range df.stages {
			for _, c := range st.copies {
				if c.from != "" {
					continue
				}
				for _, src := range c.srcs {
					if strings.Contains(src, "://") {
						continue
					}
					mustExist(t, fmt.Sprintf("Dockerfile:%d: COPY source", c.line), filepath.Join(repoRoot, src))
					if src != "." && di.excluded(src) {
						t.Errorf("Dockerfile:%d: COPY %s, but .dockerignore leaves it out of the context", c.line, src)
					}
				}
			}
		}
		// COPY . . must still carry every file `go build ./cmd/server`
		// reads from this module.
		cmd := exec.Command("go", "list", "-deps", "-f",
			`{{if .Module}}{{if .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
			"./cmd/server")
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ./cmd/server: %v", err)
		}
		root, err := filepath.Abs(repoRoot)
		if err != nil {
			t.Fatal(err)
		}
		files := append(strings.Fields(string(out)), filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
		for _, f := range files {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			if di.excluded(filepath.ToSlash(rel)) {
				t.Errorf(".dockerignore leaves out %s, which go build ./cmd/server needs", rel)
			}
		}
		if len(files) < 3 {
			t.Errorf("go list ./cmd/server found no source files")
		}
	})

	t.Run("build", func(t *testing.T) {
		var build string
		for _, st := range df.stages[:len(df.stages)-1] {
			for _, r := range st.runs {
				if strings.Contains(r, "go build") {
					build = r
				}
			}
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/server", "-o /out/sluice"} {
			if !strings.Contains(build, want) {
				t.Errorf("RUN %q: want %q in the go build", build, want)
			}
		}
		mustExist(t, "go build package", filepath.Join(repoRoot, "cmd", "server"))
	})

	t.Run("runtime", func(t *testing.T) {
		if u, _, _ := strings.Cut(final.user, ":"); u == "" || u == "root" || u == "0" {
			t.Errorf("final stage USER %q: want a non-root user", final.user)
		}
		if !slices.Equal(final.entrypoint, []string{"/sluice"}) {
			t.Errorf("ENTRYPOINT %q, want [\"/sluice\"]", final.entrypoint)
		}
		if !slices.Contains(final.copiedPaths, "/sluice") {
			t.Errorf("final stage copies %v, want the binary at /sluice", final.copiedPaths)
		}
		// The default --config is "config" in the working directory: no
		// SLUICE_CONFIG, which would win over envoyproxy/ratelimit's
		// RUNTIME_* variables in its deployments.
		if _, ok := df.env["SLUICE_CONFIG"]; ok {
			t.Errorf("ENV SLUICE_CONFIG is set: it would win over RUNTIME_ROOT in envoyproxy/ratelimit deployments")
		}
		if cfg := path.Join(final.workdir, "config"); final.workdir == "" || !slices.Contains(final.copiedPaths, cfg) {
			t.Errorf("WORKDIR %q, final stage copies %v: want the config copied to WORKDIR/config", final.workdir, final.copiedPaths)
		}
		for _, p := range []int{defaultHTTPPort, defaultGRPCPort, 6070} {
			if !slices.Contains(df.expose, p) {
				t.Errorf("EXPOSE %v lacks %d", df.expose, p)
			}
		}
		// envoyproxy/ratelimit's deployments run /bin/ratelimit as uid 65534.
		if final.user != "65534:65534" {
			t.Errorf("USER %q, want 65534:65534 (nobody, as envoyproxy/ratelimit's deployments run it)", final.user)
		}
		linked := false
		for _, st := range df.stages[:len(df.stages)-1] {
			for _, r := range st.runs {
				linked = linked || strings.Contains(r, "ln -s /sluice /out/root/bin/ratelimit")
			}
		}
		if !linked || !slices.ContainsFunc(final.copies, func(c copyInstr) bool { return c.dest == "/" && slices.Contains(c.srcs, "/out/root/") }) {
			t.Errorf("want /bin/ratelimit as a symlink to /sluice, made in the build stage under /out/root and copied to /")
		}
	})
}

// TestComposeConfig loads docker-compose.yml with compose-go, the loader
// of the docker compose CLI itself: the file must validate against the
// Compose specification's schema and be consistent (every depends_on and
// volume names something that exists), as `docker compose config` checks
// it; no Docker engine or compose binary is needed. It then checks what the
// loader resolved: the build context, the published ports and the
// environment Sluice gets.
func TestComposeConfig(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("sluice"), cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	s, err := p.GetService("sluice")
	if err != nil {
		t.Fatal(err)
	}
	if s.Build == nil || filepath.Clean(s.Build.Context) != root {
		t.Errorf("sluice: build context %v, want %s", s.Build, root)
	}
	published := map[uint32]string{}
	for _, pc := range s.Ports {
		published[pc.Target] = pc.Published
	}
	for _, port := range []uint32{defaultHTTPPort, defaultGRPCPort} {
		if published[port] != strconv.Itoa(int(port)) {
			t.Errorf("sluice: container port %d published as %q, want %d", port, published[port], port)
		}
	}
	if cfg := s.Environment["SLUICE_CONFIG"]; cfg == nil || !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeBind && v.Target == *cfg && v.Source == filepath.Join(root, "config")
	}) {
		t.Errorf("sluice: SLUICE_CONFIG %v is not where ./config is mounted (%v)", cfg, s.Volumes)
	}
}
