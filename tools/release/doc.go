// Package release holds the tests of the release's configuration
// (.goreleaser.yaml, and the Makefile targets around it), which need no
// network and no goreleaser: every archived page's relative links land in
// the archive, and the image reaches dist/ by the archive goreleaser makes
// of the layout its before hook writes outside dist/, so that checksums.txt
// names only files dist/ holds and --clean removes nothing the release
// needs. The package has no code of its own.
package release
