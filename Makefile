# make test: everything CI runs. It installs redis-server when it is missing
# (the Redis and integration tests start their own servers on free ports) and
# Debian's chromium (the status page's browser test drives it headless with
# chromedp; no browser is downloaded). It also checks the license inventory,
# and test/integration and deploy build the image and render the Helm chart
# with the tools module's commands. It takes tens of minutes: its vet and
# unit steps took 36 min here (2 vCPUs shared with other builds, load
# average 25), where make unit-quick took 7.5 min and make tools 3 min.
GO ?= go
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FUZZTIME ?= 10s
# The release this tree is (a tag vVERSION marks it); the binary, /config,
# the image labels, the docs and the manifests all name it.
VERSION := $(shell cat VERSION)
STAMP := -X github.com/sluicehq/sluice/internal/version.stamp=$(VERSION)
# goreleaser runs with go run, so it is no dependency of either module.
GORELEASER := github.com/goreleaser/goreleaser/v2@v2.15.1

.PHONY: test deps vet unit unit-quick fuzz compat bench build tools licenses licenses-check image push release-snapshot

test: deps vet unit tools licenses-check fuzz

# The compose file is checked by compose-go, a Go library (no binary). The
# image ships Debian's CA bundle (ca-certificates), read from this machine.
deps:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && test -x /usr/bin/chromium && test -f /etc/ssl/certs/ca-certificates.crt || { \
		echo "installing redis-server, redis-tools (Redis and integration tests), chromium (status page browser test) and ca-certificates (the image's CA bundle)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server redis-tools chromium ca-certificates >/dev/null; }
	@redis-server --version
	@/usr/bin/chromium --version 2>/dev/null

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) -C tools vet ./...

# Unit, race and integration tests in one run: test/integration builds the
# binary itself and runs it against a real redis-server.
unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# The unit tests alone, for a quick check while working: no race detector
# and not test/integration (which builds the binary and runs it, with the
# image and the browser, against redis-server); pkg/redis still starts a
# redis-server of its own. make test runs them all, with -race.
unit-quick:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/integration)

# Short runs of every fuzz target; a crasher lands in testdata/fuzz and
# becomes a regression test (.ci/fuzz says how it copes with a Go 1.26 bug).
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) .ci/fuzz

# envoyproxy/ratelimit's own configs must load (valid/) or be refused with a
# positioned error (invalid/), every RateLimitConfig Envoy Gateway generates
# must build and decide when served over xDS (envoy-gateway/), and
# test/integration's copies of the Istio and Envoy Gateway Deployments must
# match the originals. They live in shared/compat beside the repository, not
# in it, hence a target of their own (CI runs it).
compat:
	@test -d ../shared/compat/valid || { echo "make compat needs envoyproxy/ratelimit's and Envoy Gateway's configs in ../shared/compat beside this checkout (CI lays them there); they are not in the repository"; exit 2; }
	$(GO) test -tags compat -count=1 -run Compat ./pkg/descriptors/ ./pkg/xdsconfig/ ./internal/app/ ./test/integration/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The tools module's own tests (the image builder, the license inventory).
# The image test (test/integration) and the chart test (deploy) run in unit.
tools:
	$(GO) -C tools test -count=1 ./...

# THIRD_PARTY_LICENSES.md: every module linked into the binary with its
# license, as go-licenses classifies it. licenses-check (CI) fails when the
# file is out of date or a module's license is unknown, forbidden or
# restricted (GPL-like), none of which an Apache-2.0 binary can ship.
licenses:
	$(GO) -C tools run ./cmd/licenses -dir .. -write ../THIRD_PARTY_LICENSES.md ./cmd/server
licenses-check:
	$(GO) -C tools run ./cmd/licenses -dir .. -check ../THIRD_PARTY_LICENSES.md ./cmd/server

# bin/sluice, stamped with VERSION (--version, /config).
build:
	$(GO) build -ldflags "$(STAMP)" -o bin/sluice ./cmd/server

# build/image: the linux/amd64 and linux/arm64 image as an OCI layout (and
# build/image.tar, an oci-archive), built without a Docker daemon. Not in
# dist/, which goreleaser empties (release-snapshot writes build/image too).
image:
	$(GO) -C tools run ./cmd/sluice-image -src .. -version $(VERSION) -out ../build/image

# make push IMAGE=registry.example.com/sluice:TAG builds the image and pushes
# it, both platforms under one tag, with docker login's credentials
# (tools/cmd/sluice-push; no Docker daemon). It prints the digest pushed.
push:
	@test -n "$(IMAGE)" || { echo "make push needs IMAGE=registry/repository:tag, e.g. make push IMAGE=registry.example.com/sluice:$(VERSION)"; exit 2; }
	@$(MAKE) --no-print-directory image
	$(GO) -C tools run ./cmd/sluice-push -layout ../build/image -image $(IMAGE)

# A release build without publishing: binaries and archives for linux amd64
# and arm64, the image as an oci-archive, and checksums of them all, in
# dist/ (.goreleaser.yaml); the image's layout stays in build/image.
release-snapshot:
	$(GO) run $(GORELEASER) release --snapshot --clean
