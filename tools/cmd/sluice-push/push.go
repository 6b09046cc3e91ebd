package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// options is what one push sends where.
type options struct {
	Layout  string // the OCI image layout directory
	Image   string // the reference to push to, registry/repository:tag
	RefName string // which of the layout's entries; empty: its only one
	// Remote are extra options of every registry call (tests pass a
	// transport); the keychain and the context are set by push.
	Remote []remote.Option
}

// refNameKey is the annotation that names an entry of an OCI layout's
// index.json (sluice-image sets it to the version).
const refNameKey = "org.opencontainers.image.ref.name"

// push sends the layout entry o names to o.Image and returns the pushed
// reference with its digest.
func push(ctx context.Context, o options) (string, error) {
	ref, err := name.ParseReference(o.Image)
	if err != nil {
		return "", fmt.Errorf("-image %q: %w", o.Image, err)
	}
	p, err := layout.FromPath(o.Layout)
	if err != nil {
		return "", fmt.Errorf("-layout %s: not an OCI image layout (make image writes one): %w", o.Layout, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return "", fmt.Errorf("-layout %s: %w", o.Layout, err)
	}
	desc, err := entry(top, o.RefName)
	if err != nil {
		return "", fmt.Errorf("-layout %s: %w", o.Layout, err)
	}
	opts := append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, o.Remote...)
	switch {
	case desc.MediaType.IsIndex():
		idx, err := top.ImageIndex(desc.Digest)
		if err == nil {
			err = remote.WriteIndex(ref, idx, opts...)
		}
		if err != nil {
			return "", fmt.Errorf("push the index %s to %s: %w", desc.Digest, ref, err)
		}
	case desc.MediaType.IsImage():
		img, err := top.Image(desc.Digest)
		if err == nil {
			err = remote.Write(ref, img, opts...)
		}
		if err != nil {
			return "", fmt.Errorf("push the image %s to %s: %w", desc.Digest, ref, err)
		}
	default:
		return "", fmt.Errorf("-layout %s: entry %s is a %s, neither an index nor an image", o.Layout, desc.Digest, desc.MediaType)
	}
	return ref.Context().Digest(desc.Digest.String()).String(), nil
}

// entry returns the descriptor of the layout's index.json entry named
// refName, or its only entry when refName is empty.
func entry(top v1.ImageIndex, refName string) (v1.Descriptor, error) {
	m, err := top.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	var names []string
	for _, d := range m.Manifests {
		if refName != "" && d.Annotations[refNameKey] == refName {
			return d, nil
		}
		names = append(names, d.Annotations[refNameKey])
	}
	switch {
	case len(m.Manifests) == 0:
		return v1.Descriptor{}, fmt.Errorf("index.json lists no image")
	case refName == "" && len(m.Manifests) == 1:
		return m.Manifests[0], nil
	case refName == "":
		return v1.Descriptor{}, fmt.Errorf("index.json lists %d entries (%s): choose one with -ref-name", len(m.Manifests), quoted(names))
	}
	return v1.Descriptor{}, fmt.Errorf("-ref-name %q: index.json names none such (it has %s)", refName, quoted(names))
}

// quoted lists names quoted, in order, for a message.
func quoted(names []string) string {
	q := slices.Clone(names)
	for i, n := range q {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
