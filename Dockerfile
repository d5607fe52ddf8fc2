# leaderd's container image.
#
#   build    compiles leaderd and the example worker, and stages the runtime
#            files with scripts/stage-rootfs
#   runtime  FROM scratch: leaderd, the libraries it links, CA certificates and
#            a non-root user; no shell, no package manager
#   demo     runtime plus the example worker (docker-compose.yml, deploy/)
#
#   docker build --target runtime -t leaderd:0.1.0 .
#   docker build --target demo -t leaderd-demo:0.1.0 .
#
# scripts/check-deploy builds the runtime and demo stages with podman from a
# binary built on the host, replacing this build stage with
# `--build-context build=DIR`; so keep every file the later stages need under
# /out in this stage.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin leaderd --example worker \
    && scripts/stage-rootfs /out target/release/leaderd target/release/examples/worker

FROM scratch AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="leaderd" \
      org.opencontainers.image.description="Leader-election sidecar: many copies contend for a Redis lease; the winner runs the work" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.base.name="scratch" \
      org.opencontainers.image.documentation="README.md and docs/ in the source tree"
COPY --from=build /out/rootfs/ /
# 65532: an unprivileged uid/gid with no home and no shell (etc/passwd above).
USER 65532:65532
# Listen on all interfaces: inside a container 127.0.0.1 is unreachable from
# the kubelet's probes and from the host. A flag or LEADERD_HTTP overrides it.
ENV LEADERD_HTTP=0.0.0.0:4040 \
    PATH=/usr/local/bin
EXPOSE 4040
ENTRYPOINT ["/usr/local/bin/leaderd"]
CMD ["run"]

FROM runtime AS demo
LABEL org.opencontainers.image.title="leaderd-demo" \
      org.opencontainers.image.description="leaderd with the example worker (examples/worker.rs), for the compose and Kubernetes demos"
COPY --from=build /out/demo/ /
