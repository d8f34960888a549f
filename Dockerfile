# syntax=docker/dockerfile:1
# The overdue container image: `docker build -t overdue:0.1.0 .`
# Stage 1 builds the release binary; stage 2 is distroless (glibc, CA
# certificates, no shell, no package manager) with that binary alone, run as
# an unprivileged user. The Helm chart in helm/overdue deploys it.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# What `cargo build` reads: the manifest and lock file, the sources (which
# embed config.default.toml and the e-mail templates) and the migrations
# (embedded by sqlx::migrate!).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin overdue \
    && cp target/release/overdue /usr/local/bin/overdue \
    && mkdir -p /var/lib/overdue

# Debian 12 like the build stage, so the binary finds the same glibc.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/overdue /usr/local/bin/overdue
# The working directory holds the default database (sqlite://overdue.db), so
# it belongs to the user overdue runs as; mount a volume here to keep it.
COPY --from=build --chown=65532:65532 /var/lib/overdue /var/lib/overdue
WORKDIR /var/lib/overdue
# distroless' "nonroot" user, by number so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/overdue"]
CMD ["serve"]
