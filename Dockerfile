# syntax=docker/dockerfile:1
# llamatap container image: a Rust build stage and a small Debian runtime.
#
#   docker build -t llamatap .
#   docker run --rm -p 8080:8080 -p 9464:9464 llamatap --upstream http://llama-server:8081
#
# The image listens on 0.0.0.0:8080 (proxy) and 0.0.0.0:9464 (admin: /metrics,
# /latency, /healthz, /readyz); flags and LLAMATAP_* variables override both.

# Same version as rust-toolchain.toml (tests/operator_kit.rs checks it).
ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-bookworm AS build
# pingora's compression crates (libz-ng-sys, zstd-sys) build C code with cmake.
# (Versions come with the pinned bookworm base image.)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY benches ./benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin llamatap \
 && install -D -m 0755 target/release/llamatap /out/llamatap \
 && strip /out/llamatap

FROM debian:bookworm-slim AS runtime
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin llamatap
COPY --from=build /out/llamatap /usr/local/bin/llamatap
COPY conf/llamatap.example.toml /etc/llamatap/llamatap.example.toml
ENV LLAMATAP_LISTEN=0.0.0.0:8080 \
    LLAMATAP_ADMIN_LISTEN=0.0.0.0:9464 \
    LLAMATAP_PID_FILE=/tmp/llamatap.pid \
    LLAMATAP_UPGRADE_SOCK=/tmp/llamatap_upgrade.sock
USER 10001
EXPOSE 8080 9464
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/llamatap"]
