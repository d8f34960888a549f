//! Two jobs, both at build time.
//!
//! - `sqlx::migrate!` embeds migrations/ at compile time; without
//!   `rerun-if-changed=migrations` a new migration file is not seen by an
//!   incremental build (sqlx's documentation recommends it).
//! - The tests' peers: which of the real programs, libraries and servers the
//!   suite talks to are missing here. Each missing one becomes
//!   `cfg(overdue_missing = "<peer>")`, and a test that needs it carries
//!   `#[cfg_attr(overdue_missing = "<peer>", ignore = "needs …")]`, so
//!   `cargo test` counts it as ignored, with its reason, instead of as passed
//!   (`cargo test -- --ignored --list` lists them). Under `CI` nothing is
//!   marked missing: there a missing peer fails the test that needs it.
//!   `tests/common/peers.rs` is the other half: a test reaching a peer this
//!   build found missing was not marked, and fails saying so.
//!   `OVERDUE_TEST_PRETEND_MISSING=all` (or a comma-separated list of peers)
//!   marks peers missing that are installed, to check the marks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Every peer, with the test's reason when it is missing.
const PEERS: &[(&str, &str)] = &[
    (
        "postgres",
        "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL",
    ),
    ("python3", "needs /usr/bin/python3 (Debian's python3)"),
    (
        "aiosmtpd",
        "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)",
    ),
    (
        "openapi_spec_validator",
        "needs openapi-spec-validator for /usr/bin/python3 (PyPI)",
    ),
    (
        "healthchecks_io",
        "needs healthchecks-io==0.4.4 for /usr/bin/python3 (PyPI)",
    ),
    (
        "synapse",
        "needs matrix-synapse for /usr/bin/python3 (PyPI)",
    ),
    (
        "helm",
        "needs helm-python-sdk==0.2.2 for /usr/bin/python3 (PyPI)",
    ),
    ("apprise", "needs the apprise CLI (PyPI's apprise)"),
    ("curl", "needs curl"),
    ("strace", "needs strace allowed to trace (Debian's strace)"),
    ("faketime", "needs libfaketime (Debian's faketime)"),
    (
        "prometheus",
        "needs promtool and prometheus (Debian's prometheus)",
    ),
    (
        "alertmanager",
        "needs Alertmanager (Debian's prometheus-alertmanager)",
    ),
    (
        "chromium",
        "needs headless chromium and chromedriver (Debian's chromium, chromium-driver)",
    ),
    ("nftables", "needs nft, as root (Debian's nftables)"),
    ("root", "needs root (mounts a tmpfs)"),
    (
        "initdb",
        "needs PostgreSQL's server programs, as root (Debian's postgresql)",
    ),
];

const PYTHON: &str = "/usr/bin/python3";

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "OVERDUE_TEST_POSTGRES_URL",
        "CI",
        "PATH",
        "OVERDUE_TEST_PRETEND_MISSING",
        "OVERDUE_HELM_PYTHON",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // Installing a peer (apt, pip) writes one of these.
    for watched in ["/var/lib/dpkg/status", "/usr/local/bin", "/usr/local/lib"] {
        if Path::new(watched).exists() {
            println!("cargo:rerun-if-changed={watched}");
        }
    }

    let names = PEERS
        .iter()
        .map(|(p, _)| format!("\"{p}\""))
        .collect::<Vec<_>>();
    println!(
        "cargo::rustc-check-cfg=cfg(overdue_missing, values({}))",
        names.join(", ")
    );

    let faketime = libfaketime();
    if let Some(path) = &faketime {
        println!(
            "cargo:rustc-env=OVERDUE_TEST_LIBFAKETIME={}",
            path.display()
        );
    } else {
        println!("cargo:rustc-env=OVERDUE_TEST_LIBFAKETIME=");
    }

    let ci = std::env::var_os("CI").is_some();
    let mut missing = BTreeSet::new();
    if !ci {
        missing = PEERS
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| !present(p, faketime.is_some()))
            .collect();
        let pretend = std::env::var("OVERDUE_TEST_PRETEND_MISSING").unwrap_or_default();
        for p in pretend.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if p == "all" {
                missing.extend(PEERS.iter().map(|(p, _)| *p));
            } else if let Some((p, _)) = PEERS.iter().find(|(name, _)| *name == p) {
                missing.insert(p);
            } else {
                panic!("OVERDUE_TEST_PRETEND_MISSING: unknown peer {p:?}");
            }
        }
    }
    for p in &missing {
        println!("cargo:rustc-cfg=overdue_missing=\"{p}\"");
    }
    let list: Vec<&str> = missing.iter().copied().collect();
    println!(
        "cargo:rustc-env=OVERDUE_TEST_MISSING_PEERS={}",
        list.join(",")
    );
}

fn present(peer: &str, faketime: bool) -> bool {
    match peer {
        "postgres" => std::env::var("OVERDUE_TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty()),
        "python3" => Path::new(PYTHON).is_file(),
        "aiosmtpd" | "openapi_spec_validator" | "healthchecks_io" | "synapse" => python_has(peer),
        "helm" => {
            let python = std::env::var("OVERDUE_HELM_PYTHON").unwrap_or_else(|_| PYTHON.into());
            python_has_in(&python, "helm_python")
        }
        "apprise" | "curl" => on_path(peer).is_some(),
        "strace" => {
            on_path("strace").is_some()
                && succeeds(Command::new("strace").args(["-o", "/dev/null", "true"]))
        }
        "faketime" => faketime,
        "prometheus" => on_path("promtool").is_some() && on_path("prometheus").is_some(),
        "alertmanager" => {
            on_path("prometheus-alertmanager").is_some() || on_path("alertmanager").is_some()
        }
        "chromium" => {
            ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
                .iter()
                .any(|p| Path::new(p).is_file())
                && ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
                    .iter()
                    .any(|p| Path::new(p).is_file())
        }
        "nftables" => root() && on_path("nft").is_some(),
        "root" => root(),
        "initdb" => root() && initdb(),
        _ => unreachable!("peer {peer} has no probe"),
    }
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn python_has(module: &str) -> bool {
    python_has_in(PYTHON, module)
}

fn python_has_in(python: &str, module: &str) -> bool {
    Path::new(python).is_file()
        && succeeds(Command::new(python).args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)",
            module,
        ]))
}

fn on_path(program: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join(program))
        .find(|p| p.is_file())
}

/// Whether the build runs as root (the tests run as the same user).
fn root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Debian's PostgreSQL server programs: /usr/lib/postgresql/<version>/bin/initdb.
fn initdb() -> bool {
    std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .flatten()
            .any(|v| v.path().join("bin/initdb").is_file())
    })
}

/// libfaketime's multithreaded library, wherever this architecture keeps it.
fn libfaketime() -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/lib/faketime")];
    if let Ok(lib) = std::fs::read_dir("/usr/lib") {
        dirs.extend(lib.flatten().map(|e| e.path().join("faketime")));
    }
    dirs.sort();
    dirs.into_iter()
        .map(|d| d.join("libfaketimeMT.so.1"))
        .find(|p| p.is_file())
}
