package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The image test builds the image as make image does (tools/cmd/sluice-image,
// no Docker daemon) and reads it as a container runtime would, with nothing
// but the standard library: the OCI layout's index, each platform's
// manifest and config, and its layers' files, every blob checked against
// its digest. It checks the Dockerfile's contract there and runs the
// image's own binary from the unpacked root with Istio's sample env.

// ociDescriptor is the part of an OCI descriptor the test reads.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// ociImageConfig is the part of an OCI image config the test reads.
type ociImageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		WorkingDir   string              `json:"WorkingDir"`
		Env          []string            `json:"Env"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// imageFile is one file of an image's root, its last layer's version.
type imageFile struct {
	hdr  *tar.Header
	data []byte
}

// platformImage is one platform's image: its config and its root's files.
type platformImage struct {
	config ociImageConfig
	files  map[string]imageFile // by path without a leading slash; dirs end in /
}

// ociLayout reads an OCI image layout directory.
type ociLayout struct{ dir string }

// blob returns the blob d names, checking its size and digest.
func (l ociLayout) blob(d ociDescriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s: %d bytes with sha256 %x, want %d bytes", d.Digest, len(b), sum, d.Size)
	}
	return b, nil
}

func (l ociLayout) json(d ociDescriptor, wantType string, v any) error {
	if d.MediaType != wantType {
		return fmt.Errorf("%s: media type %q, want %q", d.Digest, d.MediaType, wantType)
	}
	b, err := l.blob(d)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
	ociConfig   = "application/vnd.oci.image.config.v1+json"
	ociLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// readImages reads the layout's one image index (named version) into its
// platforms' images, by "os/arch".
func readImages(dir, version string) (map[string]*platformImage, error) {
	l := ociLayout{dir}
	var top struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		return nil, fmt.Errorf("index.json: want one image index named %s, got %+v", version, top.Manifests)
	}
	var idx struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	if err := l.json(top.Manifests[0], ociIndex, &idx); err != nil {
		return nil, err
	}
	imgs := map[string]*platformImage{}
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("index: manifest %s has no platform", d.Digest)
		}
		img, err := readImage(l, d)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", d.Platform.OS, d.Platform.Architecture, err)
		}
		imgs[d.Platform.OS+"/"+d.Platform.Architecture] = img
	}
	return imgs, nil
}

// readImage reads one manifest, its config and its layers.
func readImage(l ociLayout, d ociDescriptor) (*platformImage, error) {
	var m struct {
		Config ociDescriptor   `json:"config"`
		Layers []ociDescriptor `json:"layers"`
	}
	if err := l.json(d, ociManifest, &m); err != nil {
		return nil, err
	}
	img := &platformImage{files: map[string]imageFile{}}
	if err := l.json(m.Config, ociConfig, &img.config); err != nil {
		return nil, err
	}
	if len(img.config.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%d diff_ids for %d layers", len(img.config.RootFS.DiffIDs), len(m.Layers))
	}
	for i, ld := range m.Layers {
		if ld.MediaType != ociLayer {
			return nil, fmt.Errorf("layer %d: media type %q, want %q", i, ld.MediaType, ociLayer)
		}
		b, err := l.blob(ld)
		if err != nil {
			return nil, err
		}
		if err := img.addLayer(b, img.config.RootFS.DiffIDs[i]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return img, nil
}

// addLayer unpacks a gzipped layer over img's files, checking that the
// uncompressed tar is diffID.
func (img *platformImage) addLayer(gz []byte, diffID string) error {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != diffID {
		return fmt.Errorf("uncompressed sha256 %x, config says %s", sum, diffID)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		if strings.Contains(filepath.Base(name), ".wh.") {
			return fmt.Errorf("%s: a whiteout, but nothing is below this image", name)
		}
		img.files[name] = imageFile{hdr: h, data: data}
	}
}

// imageContract is what the Dockerfile promises and the image must hold.
type imageContract struct {
	user, workDir string
	entrypoint    []string
	ports         []string
	dropinLink    string // /bin/ratelimit's target
	configDir     string // where the example config is copied
	labels        map[string]string
}

// readDockerfile reads the contract from the Dockerfile's final stage:
// USER, WORKDIR, ENTRYPOINT, EXPOSE, LABEL (with ARG defaults applied),
// COPY config, and the ln -s that makes /bin/ratelimit.
func readDockerfile(path string) (*imageContract, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	c := &imageContract{labels: map[string]string{}}
	// An ARG before the first FROM is a default that a stage sees only if
	// it declares the ARG again; args are the current stage's.
	global, args, inStage := map[string]string{}, map[string]string{}, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch instr {
		case "FROM":
			inStage, args, c.labels = true, map[string]string{}, map[string]string{}
		case "ARG":
			k, v, hasDefault := strings.Cut(rest, "=")
			switch {
			case !inStage:
				global[k] = v
			case hasDefault:
				args[k] = v
			default:
				args[k] = global[k]
			}
		case "USER":
			c.user = rest
		case "WORKDIR":
			c.workDir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &c.entrypoint); err != nil {
				return nil, fmt.Errorf("ENTRYPOINT: %w", err)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				c.ports = append(c.ports, p+"/tcp")
			}
		case "LABEL":
			for _, m := range regexp.MustCompile(`([\w.]+)="([^"]*)"`).FindAllStringSubmatch(rest, -1) {
				c.labels[m[1]] = os.Expand(m[2], func(k string) string { return args[k] })
			}
		case "COPY":
			if f := strings.Fields(rest); len(f) == 2 && f[0] == "config" {
				c.configDir = strings.TrimPrefix(f[1], "/")
			}
		case "RUN":
			if m := regexp.MustCompile(`ln -s (\S+) /out/root/bin/ratelimit`).FindStringSubmatch(rest); m != nil {
				c.dropinLink = m[1]
			}
		}
	}
	return c, sc.Err()
}

// checkImage checks one platform's image against the contract.
func checkImage(img *platformImage, arch string, c *imageContract, version string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	cfg := img.config
	if cfg.OS != "linux" || cfg.Architecture != arch {
		bad("config: platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, arch)
	}
	if cfg.Config.User != c.user || c.user != "65534:65534" {
		bad("config: User %q, Dockerfile %q, want 65534:65534 (nobody)", cfg.Config.User, c.user)
	}
	if !slices.Equal(cfg.Config.Entrypoint, c.entrypoint) || len(cfg.Config.Cmd) != 0 {
		bad("config: Entrypoint %q Cmd %q, want the Dockerfile's %q and no Cmd", cfg.Config.Entrypoint, cfg.Config.Cmd, c.entrypoint)
	}
	if cfg.Config.WorkingDir != c.workDir {
		bad("config: WorkingDir %q, want %q", cfg.Config.WorkingDir, c.workDir)
	}
	if got := slices.Sorted(maps.Keys(cfg.Config.ExposedPorts)); !slices.Equal(got, slices.Sorted(slices.Values(c.ports))) {
		bad("config: ExposedPorts %q, want %q", got, c.ports)
	}
	for _, e := range cfg.Config.Env {
		if strings.HasPrefix(e, "SLUICE_") {
			bad("config: Env %s: a SLUICE_* variable would win over envoyproxy/ratelimit's", e)
		}
	}
	for k, v := range c.labels {
		if cfg.Config.Labels[k] != v {
			bad("config: label %s = %q, Dockerfile %q", k, cfg.Config.Labels[k], v)
		}
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": version,
		"org.opencontainers.image.source": "https://github.com/sluicehq/sluice", "org.opencontainers.image.licenses": "Apache-2.0"} {
		if cfg.Config.Labels[k] != want {
			bad("config: label %s = %q, want %q", k, cfg.Config.Labels[k], want)
		}
	}
	return append(errs, checkImageFiles(img, arch, c)...)
}

// elfMachine is the ELF machine each architecture's binary must be.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkImageFiles checks the root: exactly the entrypoint, its drop-in
// link, the example config, the CA bundle and passwd/group, all root's and
// none writable by others; the binary static for its architecture.
func checkImageFiles(img *platformImage, arch string, c *imageContract) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	entry := strings.TrimPrefix(c.entrypoint[0], "/")
	want := []string{entry, "bin/ratelimit", "etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt"}
	repoConfig, err := filepath.Glob("../../config/*")
	if err != nil || len(repoConfig) == 0 {
		return []error{fmt.Errorf("no files in config/ (%v)", err)}
	}
	for _, p := range repoConfig {
		want = append(want, c.configDir+"/"+filepath.Base(p))
	}
	var got []string
	for name, f := range img.files {
		if f.hdr.Typeflag != tar.TypeDir {
			got = append(got, name)
		}
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 {
			bad("%s: owned by %d:%d, want root (the process, uid 65534, cannot change it)", name, f.hdr.Uid, f.hdr.Gid)
		}
		if f.hdr.Typeflag != tar.TypeSymlink && f.hdr.Mode&0o002 != 0 {
			bad("%s: mode %o is writable by others", name, f.hdr.Mode)
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		bad("files %q, want exactly %q (no shell, nothing else)", got, slices.Sorted(slices.Values(want)))
	}
	if l := img.files["bin/ratelimit"]; l.hdr == nil || l.hdr.Typeflag != tar.TypeSymlink || l.hdr.Linkname != c.dropinLink || c.dropinLink != c.entrypoint[0] {
		bad("bin/ratelimit: want a symlink to the Dockerfile's %q, the entrypoint %q", c.dropinLink, c.entrypoint[0])
	}
	if f := img.files[entry]; f.hdr == nil || f.hdr.Mode&0o111 != 0o111 {
		bad("%s: missing or not executable", entry)
	} else if err := checkStatic(f.data, elfMachine[arch]); err != nil {
		bad("%s: %v", entry, err)
	}
	for _, p := range repoConfig {
		b, _ := os.ReadFile(p)
		if f := img.files[c.configDir+"/"+filepath.Base(p)]; f.hdr != nil && !bytes.Equal(f.data, b) {
			bad("%s/%s differs from config/%s", c.configDir, filepath.Base(p), filepath.Base(p))
		}
	}
	if n, err := countCerts(img.files["etc/ssl/certs/ca-certificates.crt"].data); err != nil || n < 50 {
		bad("etc/ssl/certs/ca-certificates.crt: %d certificates (%v), want a CA bundle", n, err)
	}
	if !strings.Contains(string(img.files["etc/passwd"].data), "nobody:x:65534:65534:") {
		bad("etc/passwd has no nobody with uid 65534")
	}
	return errs
}

// checkStatic checks that b is an ELF executable for machine with no
// interpreter and no shared libraries: it runs on an empty root.
func checkStatic(b []byte, machine elf.Machine) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		return fmt.Errorf("ELF %v %v, want an executable for %v", f.Type, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("dynamically linked (%v): it would not start without a libc in the image", p.Type)
		}
	}
	return nil
}

// countCerts parses a PEM bundle, failing on a block that is no certificate.
func countCerts(b []byte) (int, error) {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n, nil
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return n, err
		}
		n++
	}
}

// unpack writes img's files under a new directory, as a runtime's
// snapshotter would, and returns it.
func unpack(t *testing.T, img *platformImage) string {
	t.Helper()
	root := t.TempDir()
	for _, name := range slices.Sorted(maps.Keys(img.files)) {
		f, p := img.files[name], filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch f.hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(f.hdr.Linkname, p)
		default:
			err = os.WriteFile(p, f.data, os.FileMode(f.hdr.Mode)&0o777)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// inRoot resolves path as the container would see it inside root: an
// absolute symlink points into root, not at the host.
func inRoot(t *testing.T, root, path string) string {
	t.Helper()
	p := filepath.Join(root, path)
	target, err := os.Readlink(p)
	if err != nil {
		return p
	}
	if filepath.IsAbs(target) {
		return inRoot(t, root, target)
	}
	return inRoot(t, root, filepath.Join(filepath.Dir(path), target))
}

func readVERSION(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestImage builds the image for linux/amd64 and linux/arm64, checks both
// against the Dockerfile's contract, and runs the amd64 image's binary.
func TestImage(t *testing.T) {
	version := readVERSION(t)
	contract, err := readDockerfile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if contract.user == "" || len(contract.entrypoint) != 1 || contract.dropinLink == "" || contract.configDir == "" || len(contract.ports) < 3 {
		t.Fatalf("read from the Dockerfile: %+v: has it changed shape? update readDockerfile", contract)
	}
	src, _ := filepath.Abs("../..")
	out := filepath.Join(t.TempDir(), "image")
	build := exec.Command("go", "run", "./cmd/sluice-image", "-src", src, "-version", version, "-out", out)
	build.Dir = filepath.Join(src, "tools")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image's build failed: %v\n%s", err, b)
	}
	imgs, err := readImages(out, version)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(imgs)); !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("platforms %q, want linux/amd64 and linux/arm64", got)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, err := range checkImage(imgs["linux/"+arch], arch, contract, version) {
			t.Errorf("linux/%s: %v", arch, err)
		}
	}
	if t.Failed() {
		return
	}
	amd64 := imgs["linux/amd64"]
	t.Logf("linux/amd64 and linux/arm64: user %s, entrypoint %q, workdir %s, ports %q, labels %v, files %q",
		amd64.config.Config.User, amd64.config.Config.Entrypoint, amd64.config.Config.WorkingDir,
		slices.Sorted(maps.Keys(amd64.config.Config.ExposedPorts)), amd64.config.Config.Labels, slices.Sorted(maps.Keys(amd64.files)))
	checkImageRejects(t, amd64, contract, version)
	root := unpack(t, amd64)
	runImage(t, root, imgs["linux/amd64"].config, version)
}

// runImage runs the unpacked image: its entrypoint's version, the image as
// docker run starts it (the example config from the working directory,
// the in-memory store), and /bin/ratelimit with Istio's sample env.
func runImage(t *testing.T, root string, cfg ociImageConfig, version string) {
	entry := inRoot(t, root, cfg.Config.Entrypoint[0])
	if out, err := exec.Command(entry, "--version").CombinedOutput(); err != nil || string(out) != "sluice "+version+"\n" {
		t.Errorf("%s --version = %q (%v), want \"sluice %s\\n\"", cfg.Config.Entrypoint[0], out, err, version)
	}

	cmd := exec.Command(entry, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "", "--log-format", "json")
	cmd.Args[0] = cfg.Config.Entrypoint[0]
	cmd.Dir = filepath.Join(root, cfg.Config.WorkingDir)
	cmd.Env = cfg.Config.Env
	s := startCmd(t, cmd)
	var conf struct {
		Version string   `json:"version"`
		Files   []string `json:"files"`
		Domains []string `json:"domains"`
	}
	_, body := httpGet(t, "http://"+s.HTTPAddr+"/config")
	if err := json.Unmarshal([]byte(body), &conf); err != nil {
		t.Fatalf("/config: %v: %s", err, body)
	}
	if conf.Version != version || !slices.Contains(conf.Domains, "edge") || len(conf.Files) == 0 {
		t.Errorf("/config of the image as docker run starts it: version %q, files %q, domains %q; want %s and the example config's domain edge",
			conf.Version, conf.Files, conf.Domains, version)
	}

	dropin := inRoot(t, root, "/bin/ratelimit")
	if dropin != entry {
		t.Errorf("/bin/ratelimit resolves to %s in the image, want the entrypoint %s", dropin, entry)
	}
	s = runIstioSample(t, dropin, cfg.Config.Env...)
	_, body = httpGet(t, "http://"+loopback(t, s.HTTPAddr)+"/config")
	if err := json.Unmarshal([]byte(body), &conf); err != nil || conf.Version != version {
		t.Errorf("/config as Istio's sample runs the image: version %q (%v), want %s", conf.Version, err, version)
	}
}

// checkImageRejects proves checkImage bites: each case breaks a copy of a
// good image the way a build might, and checkImage must report it.
func checkImageRejects(t *testing.T, good *platformImage, c *imageContract, version string) {
	file := func(name string, typ byte, mode int64, data []byte) imageFile {
		return imageFile{hdr: &tar.Header{Name: name, Typeflag: typ, Mode: mode}, data: data}
	}
	for _, tc := range []struct {
		name  string
		spoil func(img *platformImage)
		want  string
	}{
		{"root user", func(img *platformImage) { img.config.Config.User = "" }, "User"},
		{"a shell", func(img *platformImage) { img.files["bin/sh"] = file("bin/sh", tar.TypeReg, 0o755, nil) }, "no shell"},
		{"drop-in path a copy", func(img *platformImage) {
			img.files["bin/ratelimit"] = file("bin/ratelimit", tar.TypeReg, 0o755, img.files["sluice"].data)
		}, "bin/ratelimit: want a symlink"},
		{"wrong architecture", func(img *platformImage) {
			img.files["sluice"] = file("sluice", tar.TypeReg, 0o755, good.files["sluice"].data)
		}, "want an executable for EM_AARCH64"},
		{"SLUICE_ env", func(img *platformImage) { img.config.Config.Env = append(img.config.Config.Env, "SLUICE_CONFIG=/x") }, "SLUICE_CONFIG"},
		{"other version", func(img *platformImage) { img.config.Config.Labels["org.opencontainers.image.version"] = "0.2.0" }, "image.version"},
		{"port missing", func(img *platformImage) { delete(img.config.Config.ExposedPorts, "6070/tcp") }, "ExposedPorts"},
		{"config edited", func(img *platformImage) {
			f := img.files[c.configDir+"/edge.yaml"]
			img.files[c.configDir+"/edge.yaml"] = imageFile{hdr: f.hdr, data: append([]byte("#\n"), f.data...)}
		}, "differs from config/edge.yaml"},
		{"world-writable", func(img *platformImage) {
			f := img.files["etc/passwd"]
			img.files["etc/passwd"] = file("etc/passwd", tar.TypeReg, 0o666, f.data)
		}, "writable by others"},
	} {
		img := &platformImage{config: good.config, files: maps.Clone(good.files)}
		img.config.Config.Labels = maps.Clone(good.config.Config.Labels)
		img.config.Config.ExposedPorts = maps.Clone(good.config.Config.ExposedPorts)
		img.config.Config.Env = slices.Clone(good.config.Config.Env)
		arch := "amd64"
		if tc.name == "wrong architecture" {
			arch = "arm64"
			img.config.Architecture = "arm64"
		}
		tc.spoil(img)
		errs := checkImage(img, arch, c, version)
		if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
			t.Errorf("%s: errors %v, want one containing %q", tc.name, errs, tc.want)
		}
	}
}
