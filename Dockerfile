# Sluice: a small, non-root image holding one static binary and the example
# descriptor config. docker-compose.yml builds it for the demo.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 sluice
#
# Settings are the binary's flags or their SLUICE_* environment twins (see the
# README); SLUICE_REDIS_URL empty means the in-memory store. The image is also
# a drop-in for envoyproxy/ratelimit's (docs/MIGRATING.md): the binary answers
# as /bin/ratelimit, which those deployments run, and reads their variables
# (REDIS_URL, RUNTIME_ROOT, ...) under the SLUICE_* ones; so this file sets no
# SLUICE_* variable, which would win over theirs.

# The version --version, /config and the labels report: the release this
# tree is, the repository's VERSION (a test keeps them equal). Declared
# before the first FROM so that both stages see it.
ARG VERSION=0.3.0

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change reuses the downloaded modules layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION
# Static (no cgo) so it runs on distroless/static; -trimpath and -s -w keep
# build paths and debug info out of the image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/sluicehq/sluice/internal/version.stamp=${VERSION}" -o /out/sluice ./cmd/server
# /bin/ratelimit is a symlink to /sluice: copied as part of a tree, a link
# stays a link (one binary in the image).
RUN mkdir -p /out/root/bin && ln -s /sluice /out/root/bin/ratelimit

# distroless static: no shell, no package manager, CA certificates for rediss://.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
COPY --from=build /out/root/ /
# The example config, so the image serves on its own. It is the default
# --config ("config", relative to the working directory); mount a directory
# over /etc/sluice/config to use your own (docker-compose.yml mounts
# ./config), or set SLUICE_CONFIG, or envoyproxy/ratelimit's RUNTIME_ROOT,
# RUNTIME_SUBDIRECTORY (its layout: ROOT/SUBDIRECTORY/config).
COPY config /etc/sluice/config
WORKDIR /etc/sluice
# HTTP (/healthz, /readyz, /healthcheck, /metrics, POST /json), gRPC
# (ShouldRateLimit) and debug (/rlconfig, pprof).
EXPOSE 8080 8081 6070
# nobody (65534), the user envoyproxy/ratelimit's deployments run it as.
# Sluice writes no file, so a read-only root filesystem is fine.
USER 65534:65534
ENTRYPOINT ["/sluice"]
# The same labels as the image tools/cmd/sluice-image builds without Docker.
ARG VERSION
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/sluicehq/sluice" \
      org.opencontainers.image.licenses="Apache-2.0"
