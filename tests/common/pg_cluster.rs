//! A throwaway PostgreSQL cluster of a test's own: `initdb` and `pg_ctl` of
//! the newest `/usr/lib/postgresql/<version>/bin`, run as the `postgres`
//! user, in a temporary directory, on a free loopback port with a socket
//! directory of its own. Tests that stop, restart or cut off their database
//! use one, so the machine's shared server and the tests on it are
//! untouched. A drop guard stops it (`-m immediate`) whatever happens.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// See the module documentation.
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The TCP port it listens on (on every address it was given).
    pub port: u16,
    addresses: Vec<String>,
}

impl PgCluster {
    /// The newest installed PostgreSQL's bin directory.
    fn bin_dir() -> Option<PathBuf> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((v, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    }

    /// Creates and starts a cluster listening on 127.0.0.1; the test needs
    /// PostgreSQL's server programs, as root (`peers`).
    pub fn create() -> PgCluster {
        Self::create_on(&["127.0.0.1"])
    }

    /// [`PgCluster::create`] listening on these loopback addresses (all
    /// on one port), each trusted like 127.0.0.1.
    pub fn create_on(addresses: &[&str]) -> PgCluster {
        super::need(super::Peer::Initdb);
        let Some(bin) = Self::bin_dir() else {
            super::missing(
                super::Peer::Initdb,
                "/usr/lib/postgresql/<version>/bin/initdb",
                "Debian's postgresql",
            );
        };
        let dir = tempfile::tempdir().expect("temp dir");
        // initdb and pg_ctl refuse to run as root: the cluster belongs to postgres.
        let status = Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(status.success(), "chown postgres {}", dir.path().display());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PgCluster {
            bin,
            dir,
            port,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
        );
        // initdb trusts 127.0.0.1/32 only; a client of another loopback
        // address may come from it.
        let hba = PathBuf::from(cluster.data()).join("pg_hba.conf");
        let mut text = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        text.push_str("\nhost all all 127.0.0.0/8 trust\n");
        std::fs::write(&hba, text).expect("write pg_hba.conf");
        cluster.start();
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The `postgres` database through 127.0.0.1.
    pub fn url(&self) -> String {
        self.url_via("127.0.0.1")
    }

    /// The `postgres` database through one of its addresses.
    pub fn url_via(&self, address: &str) -> String {
        assert!(
            self.addresses.iter().any(|a| a == address),
            "the cluster does not listen on {address}"
        );
        format!("postgres://postgres@{address}:{}/postgres", self.port)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// Runs one of PostgreSQL's programs as the postgres user.
    fn run(&self, program: &str, args: &[&str]) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(program))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("runuser {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}\n{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// Starts the cluster on its port (its loopback addresses and a socket
    /// in its own directory only) and waits until it accepts connections.
    pub fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses={} -c fsync=off",
            self.port,
            self.dir.path().display(),
            self.addresses.join(",")
        );
        let log = self.dir.path().join("postgres.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Stops it the hard way (`-m immediate`: connections are cut and open
    /// transactions are lost, as when the database host dies; the next start
    /// recovers from the WAL) and waits until it is gone.
    pub fn stop(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-m",
                "immediate",
                "-w",
                "-t",
                "60",
                "stop",
            ],
        );
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
