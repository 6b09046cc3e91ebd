# Sluice: a small, non-root image holding one static binary and the example
# descriptor config. docker-compose.yml builds it for the demo.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 sluice
#
# Settings are the binary's flags or their SLUICE_* environment twins (see the
# README); SLUICE_REDIS_URL empty means the in-memory store.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change reuses the downloaded modules layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo) so it runs on distroless/static; -trimpath and -s -w keep
# build paths and debug info out of the image.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/server

# distroless static: no shell, no package manager, CA certificates for rediss://.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
# The example config, so the image serves on its own; mount a directory over
# /etc/sluice/config to use your own (docker-compose.yml mounts ./config).
COPY config /etc/sluice/config
ENV SLUICE_CONFIG=/etc/sluice/config
# HTTP (/healthz, /readyz, /metrics, POST /json) and gRPC (ShouldRateLimit).
EXPOSE 8080 8081
# The distroless nonroot user (uid 65532); nothing here needs root.
USER nonroot:nonroot
ENTRYPOINT ["/sluice"]
