# check=skip=InvalidDefaultArgInFrom
# One image per binary of statefulops, for those who build with Docker. The build context is the repository
# root (the Go workspace and the modules' `replace ../shared` need it):
#
#   docker build --build-arg BINARY=lease-operator -t statefulops/lease-operator:v0.1.0 .
#   docker build --build-arg BINARY=testapp --build-arg PACKAGE=./e2e/cmd/testapp -t statefulops/testapp:v0.1.0 .
#
# BINARY: singleton-operator, cluster-operator, lease-operator, rollout-operator, extended-operator,
# webhook-server (PACKAGE defaults to ./$BINARY), or testapp, pause (PACKAGE=./e2e/cmd/$BINARY).
# VERSION (default below; keep it in step with the VERSION file) is stamped into the binary and the labels.
#
# The image matches what `make images` builds without Docker (e2e/cmd/images): the static binary at
# /$BINARY as the entrypoint, user 65532:65532, the OCI labels; the base here is distroless static.

# No default: a build without --build-arg BINARY stops at the last line (the check directive above keeps
# BuildKit from warning about that on every build).
ARG BINARY

FROM golang:1.26 AS build
WORKDIR /src
# The module files first, so the download layer is reused until a go.mod or go.sum changes.
COPY go.work go.work.sum* ./
COPY shared/go.mod shared/go.sum shared/
COPY singleton-operator/go.mod singleton-operator/go.sum singleton-operator/
COPY cluster-operator/go.mod cluster-operator/go.sum cluster-operator/
COPY lease-operator/go.mod lease-operator/go.sum lease-operator/
COPY rollout-operator/go.mod rollout-operator/go.sum rollout-operator/
COPY extended-operator/go.mod extended-operator/go.sum extended-operator/
COPY webhook-server/go.mod webhook-server/go.sum webhook-server/
COPY e2e/go.mod e2e/go.sum e2e/
COPY kubectl-statefulops/go.mod kubectl-statefulops/go.sum kubectl-statefulops/
RUN go mod download
COPY . .
# Declared only now: build arguments are part of the cache key of every later RUN.
ARG BINARY
ARG PACKAGE=./${BINARY}
ARG VERSION=v0.1.0
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/statefulops/statefulops/shared/version.Version=${VERSION}" \
      -o /out/${BINARY} ${PACKAGE}

FROM gcr.io/distroless/static:nonroot AS base
ARG BINARY
ARG VERSION=v0.1.0
COPY --from=build /out/${BINARY} /${BINARY}
USER 65532:65532
WORKDIR /
LABEL org.opencontainers.image.title="${BINARY}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/statefulops/statefulops" \
      org.opencontainers.image.description="statefulops ${BINARY}" \
      org.opencontainers.image.licenses="Apache-2.0"

# ENTRYPOINT takes no build arguments, so each binary has its stage and the last line picks one.
FROM base AS singleton-operator
ENTRYPOINT ["/singleton-operator"]
FROM base AS cluster-operator
ENTRYPOINT ["/cluster-operator"]
FROM base AS lease-operator
ENTRYPOINT ["/lease-operator"]
FROM base AS rollout-operator
ENTRYPOINT ["/rollout-operator"]
FROM base AS extended-operator
ENTRYPOINT ["/extended-operator"]
FROM base AS webhook-server
ENTRYPOINT ["/webhook-server"]
FROM base AS testapp
ENTRYPOINT ["/testapp"]
FROM base AS pause
ENTRYPOINT ["/pause"]

FROM ${BINARY}
