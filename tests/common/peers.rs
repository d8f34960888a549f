//! The real programs, libraries and servers tests talk to, and what a test
//! does when one is missing: the runtime half of build.rs.
//!
//! The build finds which peers are missing and marks them
//! `cfg(overdue_missing = "<peer>")`; a test that needs one carries
//! `#[cfg_attr(overdue_missing = "<peer>", ignore = "needs …")]` and is then
//! counted as ignored, with its reason, and never runs. So a test that
//! reaches a peer here either has it, or was not marked (it fails saying
//! so), or lost it after the build (it fails naming the package). Under `CI`
//! the build marks nothing: a missing peer fails the test that needs it.

/// A peer, named as in build.rs and in `cfg(overdue_missing = "…")`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A PostgreSQL server at `OVERDUE_TEST_POSTGRES_URL`.
    Postgres,
    /// `/usr/bin/python3` (Debian's python3), for the outside-in clients.
    Python3,
    /// aiosmtpd for `/usr/bin/python3`: the real SMTP server.
    Aiosmtpd,
    /// openapi-spec-validator for `/usr/bin/python3`.
    OpenapiSpecValidator,
    /// The healthchecks-io client for `/usr/bin/python3`.
    HealthchecksIo,
    /// matrix-synapse for `/usr/bin/python3`: a real homeserver.
    Synapse,
    /// helm-python-sdk for `/usr/bin/python3`: Helm's own library.
    Helm,
    /// The apprise CLI.
    Apprise,
    Curl,
    /// strace, allowed to trace its child here.
    Strace,
    /// libfaketime, to move a server's wall clock.
    Faketime,
    /// promtool and prometheus.
    Prometheus,
    Alertmanager,
    /// Headless chromium and chromedriver.
    Chromium,
    /// nft, as root: cuts a replica off from PostgreSQL.
    Nftables,
    /// Root: mounts a small tmpfs.
    Root,
    /// PostgreSQL's server programs (initdb), as root: a cluster of the test's own.
    Initdb,
}

impl Peer {
    /// The name in build.rs and in `cfg(overdue_missing = "…")`.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Postgres => "postgres",
            Peer::Python3 => "python3",
            Peer::Aiosmtpd => "aiosmtpd",
            Peer::OpenapiSpecValidator => "openapi_spec_validator",
            Peer::HealthchecksIo => "healthchecks_io",
            Peer::Synapse => "synapse",
            Peer::Helm => "helm",
            Peer::Apprise => "apprise",
            Peer::Curl => "curl",
            Peer::Strace => "strace",
            Peer::Faketime => "faketime",
            Peer::Prometheus => "prometheus",
            Peer::Alertmanager => "alertmanager",
            Peer::Chromium => "chromium",
            Peer::Nftables => "nftables",
            Peer::Root => "root",
            Peer::Initdb => "initdb",
        }
    }

    /// Whether the build found it missing (or was told to pretend so).
    pub fn missing_at_build(self) -> bool {
        env!("OVERDUE_TEST_MISSING_PEERS")
            .split(',')
            .any(|p| p == self.name())
    }
}

/// Called before a test reaches `peer`: fails when the build found it
/// missing, since a test that needs it must then have been ignored.
#[track_caller]
pub fn need(peer: Peer) {
    let name = peer.name();
    assert!(
        !peer.missing_at_build(),
        "this test needs {name}, which this build found missing, yet it ran: mark it \
         #[cfg_attr(overdue_missing = \"{name}\", ignore = \"needs …\")] (see build.rs), \
         or install {name} and build again (and do not run it with --ignored)"
    );
}

/// The peer is missing now although the build found it: always a failure
/// (under `CI`, where the build marks nothing, the usual one), naming the
/// package that provides it.
#[track_caller]
pub fn missing(peer: Peer, what: &str, package: &str) -> ! {
    need(peer);
    if std::env::var_os("CI").is_some() {
        panic!("CI is set but {what} is missing (install {package})");
    }
    panic!(
        "{what} is missing (install {package}); the build found it, so it went since: \
         `touch build.rs` and the tests that need it are counted as ignored"
    );
}

/// libfaketime's multithreaded library, as the build found it
/// (`/usr/lib/<multiarch>/faketime/libfaketimeMT.so.1`).
#[track_caller]
pub fn libfaketime() -> std::path::PathBuf {
    need(Peer::Faketime);
    let path = env!("OVERDUE_TEST_LIBFAKETIME");
    if path.is_empty() || !std::path::Path::new(path).is_file() {
        missing(Peer::Faketime, "libfaketime", "Debian's faketime");
    }
    path.into()
}
