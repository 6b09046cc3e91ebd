package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// options is what one build makes.
type options struct {
	Src      string    // the repository
	Version  string    // stamped into the binary and labelled
	Out      string    // the OCI layout directory
	Arches   []string  // linux architectures, one image each
	CABundle string    // PEM file shipped as /etc/ssl/certs/ca-certificates.crt
	Revision string    // commit label; empty for none
	Created  time.Time // the image's and every file's time
}

// The image's contract, shared with the Dockerfile.
const (
	binaryPath = "sluice"            // the entrypoint, /sluice
	dropinPath = "bin/ratelimit"     // envoyproxy/ratelimit's path, a symlink
	configDir  = "etc/sluice/config" // the example config
	workDir    = "/etc/sluice"       // so the default --config "config" is it
	user       = "65534:65534"       // nobody, as the peer's deployments run
	source     = "https://github.com/sluicehq/sluice"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
)

// ports are the HTTP, gRPC and debug listeners' defaults.
var ports = []string{"8080/tcp", "8081/tcp", "6070/tcp"}

// build writes the multi-platform image o describes.
func build(o options) error {
	base, err := baseLayer(o)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	tmp, err := os.MkdirTemp("", "sluice-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, arch := range o.Arches {
		bin := filepath.Join(tmp, "sluice-linux-"+arch)
		if err := goBuild(o, arch, bin); err != nil {
			return err
		}
		img, err := platformImage(o, arch, base, bin)
		if err != nil {
			return fmt.Errorf("linux/%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	p, err := layout.Write(o.Out, empty.Index)
	if err != nil {
		return err
	}
	// The index is named by its version, so oci:DIR:VERSION finds it.
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Version})); err != nil {
		return err
	}
	return tarDir(o.Out, o.Out+".tar", o.Created)
}

// goBuild builds the static binary for linux/arch as the Dockerfile does:
// no cgo, -trimpath, no symbol table, stamped with the version.
func goBuild(o options, arch, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-s -w -X github.com/sluicehq/sluice/internal/version.stamp="+o.Version, "-o", out, "./cmd/server")
	cmd.Dir = o.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for linux/%s: %v\n%s", arch, err, b)
	}
	return nil
}

// platformImage is one platform's image: the base layer, the Sluice layer
// holding bin, and the config.
func platformImage(o options, arch string, base v1.Layer, bin string) (v1.Image, error) {
	app, err := appLayer(o, bin)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	when := v1.Time{Time: o.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: when,
			CreatedBy: "sluice-image: CA certificates (" + o.CABundle + "), /etc/passwd, /etc/group", Comment: "no base image: scratch"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: when,
			CreatedBy: "sluice-image: /sluice, /bin/ratelimit -> /sluice, config/ in /etc/sluice/config"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, when
	cf.Config.User = user
	cf.Config.Entrypoint = []string{"/" + binaryPath}
	cf.Config.WorkingDir = workDir
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = labels(o)
	return mutate.ConfigFile(img, cf)
}

// labels are the image's OCI annotations, as the Dockerfile's LABEL sets
// them, plus the revision when known.
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":     "sluice",
		"org.opencontainers.image.version":   o.Version,
		"org.opencontainers.image.source":    source,
		"org.opencontainers.image.licenses":  "Apache-2.0",
		"org.opencontainers.image.base.name": "scratch",
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// entry is one file of a layer.
type entry struct {
	name   string // without a leading slash
	mode   int64
	data   []byte
	link   string // a symlink's target
	isDir  bool
	fromFS string // read data from this file when set
}

// baseLayer holds what scratch lacks and a Go binary may want: CA
// certificates, and users and groups for tools that look them up.
func baseLayer(o options) (v1.Layer, error) {
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("-ca-bundle: %w (install Debian's ca-certificates package)", err)
	}
	return layer(o.Created, []entry{
		{name: "etc/", isDir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{name: "etc/ssl/", isDir: true, mode: 0o755},
		{name: "etc/ssl/certs/", isDir: true, mode: 0o755},
		{name: caPath, mode: 0o644, data: ca},
	})
}

// appLayer holds the binary, its drop-in path and the example config.
func appLayer(o options, bin string) (v1.Layer, error) {
	es := []entry{
		{name: binaryPath, mode: 0o755, fromFS: bin},
		{name: "bin/", isDir: true, mode: 0o755},
		{name: dropinPath, link: "/" + binaryPath, mode: 0o777},
		{name: "etc/", isDir: true, mode: 0o755},
		{name: "etc/sluice/", isDir: true, mode: 0o755},
		{name: configDir + "/", isDir: true, mode: 0o755},
	}
	src := filepath.Join(o.Src, "config")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		name := configDir + "/" + filepath.ToSlash(rel)
		if d.IsDir() {
			es = append(es, entry{name: name + "/", isDir: true, mode: 0o755})
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		es = append(es, entry{name: name, mode: 0o644, fromFS: p})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return layer(o.Created, es)
}

// layer makes a gzip-compressed OCI layer of es, owned by root, every time
// at created, in name order.
func layer(created time.Time, es []entry) (v1.Layer, error) {
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Format: tar.FormatPAX}
		switch {
		case e.isDir:
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			data := e.data
			if e.fromFS != "" {
				b, err := os.ReadFile(e.fromFS)
				if err != nil {
					return nil, err
				}
				data = b
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
			e.data = data
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the directory dir as the tar file out (an oci-archive when
// dir is an OCI layout), in name order, every time at created.
func tarDir(dir, out string, created time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: created, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
