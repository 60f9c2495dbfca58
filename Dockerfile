# syntax=docker/dockerfile:1
#
# The idemgate image: one static binary whose commands are the container's
# arguments, so one image runs the gateway (`serve`), the workers
# (`worker`) and the schema migrations (`migrate up`):
#
#   docker build -t idemgate .
#   docker run --rm -v "$PWD/idemgate.yaml:/etc/idemgate/idemgate.yaml:ro" \
#     -p 8080:8080 idemgate serve --config /etc/idemgate/idemgate.yaml
#
# The build stage runs the same `go build` commands as `make build`
# (deploy/manifests tests that the two lists stay equal), with
# CGO_ENABLED=0 for a static binary and -trimpath, through the
# environment, so that no build path ends up in it. partnersim and the
# example shipments receiver come along for demos (deploy/compose runs
# partnersim as the upstream); the entry point is idemgate.
#
# The final stage has no shell and no package manager. It runs as the
# distroless image's nonroot user, by number (65532), so that Kubernetes'
# runAsNonRoot can check it. idemgate writes nothing to disk — no
# temporary files, no caches — so a read-only root filesystem needs no
# writable volume.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -o bin/idemgate ./cmd/idemgate && \
    go build -o bin/idemgate-examples ./examples/cmd/idemgate-examples && \
    go build -o bin/partnersim ./examples/cmd/partnersim && \
    go build -o bin/shipments-receiver ./examples/shipments/cmd/shipments-receiver

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/idemgate /src/bin/idemgate-examples /src/bin/partnersim /src/bin/shipments-receiver /usr/local/bin/
USER 65532:65532
# The ports of the container configurations (deploy/compose,
# deploy/kubernetes): listen, admin_listen and worker.admin_listen. The
# admin listeners default to loopback; a container sets them to
# ":9090" and ":9091" so that Prometheus can reach /metrics.
EXPOSE 8080 9090 9091
ENTRYPOINT ["/usr/local/bin/idemgate"]
CMD ["--help"]
