# syntax=docker/dockerfile:1
# The booking service as a container image: a static binary (CGO_ENABLED=0) on
# distroless/static (CA certificates, tzdata, /etc/passwd; no shell, no package
# manager), running as the unprivileged user nonroot (65532).
#
#   docker build -t booking .
#   docker run --rm booking serve --help     # the variables it reads
#
# deploy/compose.yaml runs it in the scale-out shape; docs/operations.md says what
# was and was not run where this was written.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# -trimpath and -s -w: no build paths or symbol tables in the image (about a
# third smaller). The empty data directory is copied below with the runtime user as owner,
# so a volume mounted there is writable without a shell to chown it.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o /out/booking ./cmd/booking \
	&& mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/booking /usr/local/bin/booking
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
# Listen on every interface inside the container (the default is loopback only).
# BOOKING_DATA_DIR holds the embedded NATS storage, and in dev mode the provider
# simulator's state and the generated master key; the scale-out shape (external
# NATS, a provider URL, master keys from the environment) writes nothing there.
ENV BOOKING_HTTP_ADDR=:8080 \
	BOOKING_DATA_DIR=/data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/booking"]
CMD ["serve"]
