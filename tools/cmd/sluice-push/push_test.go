package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeLayout writes an OCI layout as sluice-image does: one
// multi-platform index, linux/amd64 and linux/arm64, named version. It
// returns the directory and the index.
func writeLayout(t *testing.T, versions ...string) (string, []v1.ImageIndex) {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	var idxs []v1.ImageIndex
	for _, version := range versions {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, arch := range []string{"amd64", "arm64"} {
			img, err := random.Image(512, 2)
			if err != nil {
				t.Fatal(err)
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameKey: version})); err != nil {
			t.Fatal(err)
		}
		idxs = append(idxs, idx)
	}
	return dir, idxs
}

// TestPushToRegistry pushes a layout to go-containerregistry's in-process
// registry and reads it back by tag: the same index, both platforms, and
// every layer there.
func TestPushToRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir, idxs := writeLayout(t, "0.3.0")
	want, _ := idxs[0].Digest()

	var out bytes.Buffer
	image := host + "/team/sluice:0.3.0"
	if err := run(context.Background(), []string{"-layout", dir, "-image", image}, &out); err != nil {
		t.Fatal(err)
	}
	if got, wantOut := strings.TrimSpace(out.String()), host+"/team/sluice@"+want.String(); got != wantOut {
		t.Errorf("printed %q, want %q", got, wantOut)
	}

	ref, _ := name.ParseReference(image)
	pulled, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("read back %s: %v", image, err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("%s is %s, want the layout's index %s", image, got, want)
	}
	m, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, d := range m.Manifests {
		arches = append(arches, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := pulled.Image(d.Digest)
		if err != nil {
			t.Fatalf("%s: %v", d.Digest, err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatalf("%s: a layer is missing from the registry: %v", d.Platform.Architecture, err)
			}
			rc.Close()
		}
	}
	if got := strings.Join(arches, ","); got != "linux/amd64,linux/arm64" {
		t.Errorf("pushed platforms %s, want linux/amd64,linux/arm64", got)
	}
}

// TestPushChoosesByRefName: a layout of several entries needs -ref-name,
// which picks the entry of that name.
func TestPushChoosesByRefName(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir, idxs := writeLayout(t, "0.3.0", "0.4.0")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-layout", dir, "-image", host + "/sluice:x"}, &out)
	if err == nil || !strings.Contains(err.Error(), `2 entries ("0.3.0", "0.4.0"): choose one with -ref-name`) {
		t.Errorf("no -ref-name: %v, want the entries named", err)
	}
	if err := run(context.Background(), []string{"-layout", dir, "-image", host + "/sluice:0.4.0", "-ref-name", "0.4.0"}, &out); err != nil {
		t.Fatal(err)
	}
	want, _ := idxs[1].Digest()
	if !strings.HasSuffix(strings.TrimSpace(out.String()), "@"+want.String()) {
		t.Errorf("printed %q, want the 0.4.0 index %s", out.String(), want)
	}
}

// TestPushRefuses: what is wrong with the arguments is named before
// anything is sent.
func TestPushRefuses(t *testing.T) {
	dir, _ := writeLayout(t, "0.3.0")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no image", []string{"-layout", dir}, "-image is required"},
		{"bad image", []string{"-layout", dir, "-image", "Registry/UPPER:tag"}, `-image "Registry/UPPER:tag"`},
		{"no layout", []string{"-layout", t.TempDir() + "/none", "-image", "127.0.0.1:1/sluice:x"}, "not an OCI image layout (make image writes one)"},
		{"unknown ref name", []string{"-layout", dir, "-image", "127.0.0.1:1/sluice:x", "-ref-name", "9.9.9"}, `-ref-name "9.9.9": index.json names none such (it has "0.3.0")`},
		{"an argument", []string{"-image", "127.0.0.1:1/sluice:x", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
