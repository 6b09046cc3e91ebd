# make test: everything CI runs. It installs redis-server when it is missing
# (the Redis and integration tests start their own servers on free ports) and
# Debian's chromium (the status page's browser test drives it headless with
# chromedp; no browser is downloaded).
GO ?= go
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FUZZTIME ?= 10s

.PHONY: test deps vet unit fuzz compat bench build

test: deps vet unit fuzz

# The compose file is checked by compose-go, a Go library (no binary).
deps:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && test -x /usr/bin/chromium || { \
		echo "installing redis-server, redis-tools (Redis and integration tests) and chromium (status page browser test)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server redis-tools chromium >/dev/null; }
	@redis-server --version
	@/usr/bin/chromium --version 2>/dev/null

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# Unit, race and integration tests in one run: test/integration builds the
# binary itself and runs it against a real redis-server.
unit:
	$(GO) test -race -count=1 -timeout 20m ./...

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

# bin/sluice, stamped with the version git describes (--version, /config).
build:
	$(GO) build -ldflags "-X github.com/sluicehq/sluice/internal/app.version=$$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/sluice ./cmd/server
