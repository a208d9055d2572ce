//! A real Remote Execution API server for the `grpc://` tests: BuildGrid (`bgd server
//! start CONFIG`) on a free loopback port, its config and log in a temp folder of its
//! own, stopped when dropped. `scripts/test` installs the pinned [`VERSION`] into a
//! virtual environment at `.toolchain/buildgrid` of the repository.
//!
//! Each mode is a config and its own start function, sharing [`BuildGrid::start_with`]:
//! [`BuildGrid::start_cache`] serves only what a cache needs (CAS, ByteStream, action
//! cache, capabilities), in memory, with no database.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The BuildGrid release `scripts/test` installs (runs on the system's Python 3.11).
pub const VERSION: &str = "0.4.4";

/// The instance name of the cache mode besides the default (empty) one.
pub const INSTANCE: &str = "kart";

/// The CAS's batch limit as BuildGrid announces it (4 MiB less 1 KiB): a larger blob
/// goes through ByteStream.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024 - 1024;

/// How long a start may take: BuildGrid imports for seconds before it listens, longer
/// on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// `bgd` as `scripts/test` installs it under the repository `repo`, if it is there.
pub fn binary(repo: &Path) -> Option<PathBuf> {
    let bgd = repo.join(".toolchain/buildgrid/bin/bgd");
    bgd.is_file().then_some(bgd)
}

/// A running BuildGrid server; stopped on drop.
pub struct BuildGrid {
    child: Child,
    dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
}

impl BuildGrid {
    /// Starts a cache-only server (CAS, ByteStream, action cache and capabilities, in
    /// memory; instances `""` and [`INSTANCE`], each with a storage of its own); panics when it
    /// cannot (a test's setup).
    pub fn start_cache(repo: &Path) -> BuildGrid {
        BuildGrid::try_start_cache(repo).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`BuildGrid::start_cache`], with the reason when it cannot start.
    pub fn try_start_cache(repo: &Path) -> Result<BuildGrid, String> {
        BuildGrid::start_with(repo, |port, _dir| {
            let services = |n: u8| {
                format!(
                    "      - !action-cache\n        cache: *ac{n}\n      - !cas\n        storage: *cas{n}\n      - !bytestream\n        storage: *cas{n}\n"
                )
            };
            let storage = |n: u8| format!("  - !lru-storage &cas{n}\n    size: 1GB\n");
            let cache = |n: u8| {
                format!(
                    "  - !lru-action-cache &ac{n}\n    storage: *cas{n}\n    max-cached-refs: 100000\n    allow-updates: true\n    cache-failed-actions: false\n"
                )
            };
            format!(
                r#"server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
# One server per port: two tests' servers must never share one.
grpc-server-options:
  grpc.so_reuseport: 0
thread-pool-size: 32
storages:
{}{}caches:
{}{}instances:
  - name: ""
    services:
{}  - name: {INSTANCE}
    services:
{}"#,
                storage(0),
                storage(1),
                cache(0),
                cache(1),
                services(0),
                services(1)
            )
        })
    }

    /// Starts `bgd server start` with the config `config(port, folder)` writes for a
    /// free loopback port (the folder is the server's own temp folder, for any files
    /// the config names), and waits until the port answers. Tries five ports: another
    /// process may take the one found free before BuildGrid binds it.
    pub fn start_with(
        repo: &Path,
        config: impl Fn(u16, &Path) -> String,
    ) -> Result<BuildGrid, String> {
        let bgd = binary(repo).ok_or_else(|| {
            format!(
                "BuildGrid is not installed at {}: run scripts/test (it installs buildgrid=={VERSION})",
                repo.join(".toolchain/buildgrid").display()
            )
        })?;
        let io = |what: &str, e: std::io::Error| format!("BuildGrid harness: cannot {what}: {e}");
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("kart-buildgrid-")
                .tempdir()
                .map_err(|e| io("create a temp folder", e))?;
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| io("find a free port", e))?
                .port();
            let conf = dir.path().join("bgd.yml");
            std::fs::write(&conf, config(port, dir.path()))
                .map_err(|e| io("write the config", e))?;
            let log = std::fs::File::create(dir.path().join("bgd.log"))
                .map_err(|e| io("create the log", e))?;
            let log2 = log.try_clone().map_err(|e| io("open the log", e))?;
            let mut child = Command::new(&bgd)
                .args(["server", "start"])
                .arg(&conf)
                .current_dir(dir.path())
                .env("HOME", dir.path())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| io("start bgd", e))?;
            let start = Instant::now();
            let mut up = false;
            while start.elapsed() < START_TIMEOUT {
                if let Ok(Some(status)) = child.try_wait() {
                    last = format!(
                        "bgd exited ({status}) on port {port}: {}",
                        tail(&dir.path().join("bgd.log"))
                    );
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    // Ours, not another process on a port taken in between: ours is
                    // still running a moment later.
                    std::thread::sleep(Duration::from_millis(200));
                    up = matches!(child.try_wait(), Ok(None));
                    if !up {
                        last = format!("bgd exited on port {port}, which another process holds");
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if up {
                return Ok(BuildGrid { child, dir, port });
            }
            if start.elapsed() >= START_TIMEOUT {
                last = format!(
                    "bgd did not listen on port {port} within {} s: {}",
                    START_TIMEOUT.as_secs(),
                    tail(&dir.path().join("bgd.log"))
                );
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(format!(
            "BuildGrid did not start on loopback (five tries); last: {last}"
        ))
    }

    /// `grpc://127.0.0.1:PORT/{instance}` (`instance` empty: the default one).
    pub fn url(&self, instance: &str) -> String {
        format!("grpc://127.0.0.1:{}/{instance}", self.port)
            .trim_end_matches('/')
            .to_string()
    }

    /// The server's own folder (config, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bgd.log")).unwrap_or_default()
    }
}

/// The last lines of a log, for a message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl Drop for BuildGrid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
