# syntax=docker/dockerfile:1
# The Switchyard scheduler: `switchyard run --config ... --health-address 0.0.0.0:10251`.
#
# Build from the repository root (the build context is the whole Cargo workspace):
#   DOCKER_BUILDKIT=1 docker build -f deploy/docker/scheduler.Dockerfile -t switchyard/scheduler:0.1.0 .
# BuildKit is needed: for the cache mounts below and for
# deploy/docker/scheduler.Dockerfile.dockerignore, which keeps target/ and .git out of the
# build context.

ARG RUST_VERSION=1
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# Every workspace member's manifest must be present for Cargo to load the workspace,
# and server/ embeds examples/demo/cluster.yaml (include_str!).
COPY Cargo.toml Cargo.lock ./
COPY proto ./proto
COPY server ./server
COPY plugin-sdk ./plugin-sdk
COPY plugins ./plugins
COPY tests ./tests
COPY examples ./examples
# The target directory is a cache mount, so the binary is copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target,id=switchyard-target \
    cargo build --release --locked -p switchyard --bin switchyard \
 && install -D -m 0755 target/release/switchyard /out/switchyard

# glibc, libgcc and CA certificates; uid/gid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/switchyard /usr/local/bin/switchyard
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/switchyard"]
