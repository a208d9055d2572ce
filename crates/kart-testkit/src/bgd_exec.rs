//! A BuildGrid with remote execution on loopback, for the executor's tests and
//! benchmarks: a throwaway PostgreSQL ([`crate::postgres`]) for the scheduler, a
//! BuildGrid server (CAS, ByteStream, ActionCache, Execution and Bots on one port,
//! instance name `""`), and workers of `bgd_worker.py` (test scaffolding: a small
//! Remote Workers API bot; see its doc comment). Everything runs in process groups of
//! its own and is killed when the harness is dropped. `scripts/test` installs
//! BuildGrid (with psycopg2) under `.toolchain/buildgrid`.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::Postgres;

/// BuildGrid's command line (`bgd`), run with its Python.
const BGD: &str = "import sys; from buildgrid.server.app import cli; sys.argv[0] = 'bgd'; cli()";

/// The worker, written into each harness's folder.
const WORKER: &str = include_str!("bgd_worker.py");

/// The Command platform property kart sets (the toolchain's identity): BuildGrid
/// rejects keys it was not told about.
pub const PLATFORM_KEYS: [&str; 1] = ["kart-toolchain"];

/// How a test worker behaves (`bgd_worker.py --mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerMode {
    /// Runs every action.
    Normal,
    /// Runs it, then flips one byte of every `.cubin` output.
    Corrupt,
    /// Takes a lease, starts the command, kills it and exits (lost mid-action).
    Die,
    /// Takes a lease and never finishes it.
    Hang,
}

impl WorkerMode {
    fn arg(self) -> &'static str {
        match self {
            WorkerMode::Normal => "normal",
            WorkerMode::Corrupt => "corrupt",
            WorkerMode::Die => "die",
            WorkerMode::Hang => "hang",
        }
    }
}

/// The Python that has BuildGrid: `KART_BUILDGRID_PYTHON`, else the repository's
/// `.toolchain/buildgrid/bin/python` (what `scripts/test` installs).
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KART_BUILDGRID_PYTHON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = repo.join(".toolchain/buildgrid/bin/python");
    p.is_file().then_some(p)
}

/// Whether BuildGrid and PostgreSQL are installed here.
pub fn available() -> bool {
    python().is_some() && crate::postgres::bin_dir().is_some()
}

/// A child in a process group of its own: the group is killed on drop.
struct Group(Child);

impl Group {
    fn spawn(cmd: &mut Command) -> std::io::Result<Group> {
        cmd.process_group(0).spawn().map(Group)
    }

    fn signal(&self, signal: i32) {
        // SAFETY: sends a signal to a process group this harness started.
        unsafe {
            libc::killpg(self.0.id() as libc::pid_t, signal);
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.signal(libc::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A BuildGrid server with execution and its workers; all stopped on drop.
pub struct BuildGridExec {
    workers: Vec<Group>,
    server: Option<Group>,
    // Dropped after the server, which holds connections to it.
    postgres: Postgres,
    dir: tempfile::TempDir,
    python: PathBuf,
    /// The server's loopback port.
    pub port: u16,
}

impl BuildGridExec {
    /// Starts PostgreSQL, BuildGrid and one worker per entry of `workers`.
    pub fn start(workers: &[WorkerMode]) -> Result<BuildGridExec, String> {
        let python = python().ok_or(
            "BuildGrid is not installed (.toolchain/buildgrid): run scripts/test, which installs it",
        )?;
        let postgres = Postgres::start()?;
        let dir = tempfile::Builder::new()
            .prefix("kart-buildgrid-")
            .tempdir()
            .map_err(|e| format!("buildgrid harness: cannot create a temp folder: {e}"))?;
        let migrate = Command::new(&python)
            .args(["-c", BGD, "migrate", "apply"])
            .arg(postgres.url())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("buildgrid harness: cannot run `bgd migrate`: {e}"))?;
        if !migrate.status.success() {
            return Err(format!(
                "buildgrid harness: `bgd migrate apply` failed ({}):\n{}",
                migrate.status,
                String::from_utf8_lossy(&migrate.stderr)
            ));
        }
        std::fs::write(dir.path().join("bgd_worker.py"), WORKER)
            .map_err(|e| format!("buildgrid harness: cannot write the worker: {e}"))?;
        let mut harness = BuildGridExec {
            workers: Vec::new(),
            server: None,
            postgres,
            dir,
            python,
            port: 0,
        };
        harness.start_server()?;
        for mode in workers {
            harness.add_worker(*mode)?;
        }
        Ok(harness)
    }

    fn start_server(&mut self) -> Result<(), String> {
        let d = self.dir.path();
        for attempt in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("buildgrid harness: cannot find a free port: {e}"))?
                .port();
            let keys: Vec<String> = PLATFORM_KEYS.iter().map(|k| format!("\"{k}\"")).collect();
            let config = format!(
                r#"server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
# One server per port: two tests' servers must never share one.
grpc-server-options:
  grpc.so_reuseport: 0
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: {url}
    pool-size: 10
    max-overflow: 20
storages:
  - !disk-storage &cas
    path: {d}/cas
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    action-cache: *ac
    storage: *cas
    property-set: !dynamic-property-set
      match-property-keys: []
      wildcard-property-keys: [{keys}]
    bot-session-keepalive-timeout: 10
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.05
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *scheduler
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
thread-pool-size: 100
"#,
                url = self.postgres.url(),
                d = d.display(),
                keys = keys.join(", "),
            );
            let config_path = d.join(format!("bgd-{attempt}.yml"));
            std::fs::write(&config_path, config)
                .map_err(|e| format!("buildgrid harness: cannot write its config: {e}"))?;
            let log = std::fs::File::create(d.join("server.log"))
                .map_err(|e| format!("buildgrid harness: cannot create the log: {e}"))?;
            let mut server = Group::spawn(
                Command::new(&self.python)
                    .args(["-c", BGD, "server", "start"])
                    .arg(&config_path)
                    .current_dir(d)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log),
            )
            .map_err(|e| format!("buildgrid harness: cannot start `bgd server`: {e}"))?;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    self.server = Some(server);
                    self.port = port;
                    return Ok(());
                }
                if !server.alive() {
                    break; // the port was taken in between, or a real failure: see below
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Err(format!(
            "BuildGrid did not start on loopback (five tries); its log:\n{}",
            self.server_log()
        ))
    }

    /// Starts one more worker.
    pub fn add_worker(&mut self, mode: WorkerMode) -> Result<(), String> {
        let d = self.dir.path();
        let n = self.workers.len();
        let log = std::fs::File::create(d.join(format!("worker-{n}.log")))
            .map_err(|e| format!("buildgrid harness: cannot create a worker log: {e}"))?;
        let worker = Group::spawn(
            Command::new(&self.python)
                .arg(d.join("bgd_worker.py"))
                .args(["--server", &format!("127.0.0.1:{}", self.port)])
                .args(["--bot-id", &format!("kart-test-worker-{n}")])
                .arg("--cache")
                .arg(d.join(format!("worker-{n}-cache")))
                .args(["--mode", mode.arg()])
                .current_dir(d)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log),
        )
        .map_err(|e| format!("buildgrid harness: cannot start a worker: {e}"))?;
        self.workers.push(worker);
        Ok(())
    }

    /// `grpc://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }

    /// Kills every worker (and whatever it runs) at once.
    pub fn kill_workers(&mut self) {
        self.workers.clear();
    }

    /// Freezes the server (SIGSTOP): its port still accepts connections, nothing
    /// answers. Dropping the harness ends it.
    pub fn freeze_server(&self) {
        if let Some(server) = &self.server {
            server.signal(libc::SIGSTOP);
        }
    }

    /// What the server logged so far.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// What every worker logged so far, one after another.
    pub fn worker_logs(&self) -> String {
        (0..self.workers.len().max(8))
            .filter_map(|n| {
                std::fs::read_to_string(self.dir.path().join(format!("worker-{n}.log"))).ok()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The harness's folder (config, CAS, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for BuildGridExec {
    fn drop(&mut self) {
        self.workers.clear();
        self.server = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_opens_a_session_and_everything_stops_on_drop() {
        if !available() {
            eprintln!(
                "skipped: BuildGrid or PostgreSQL is not installed (scripts/test installs them)"
            );
            return;
        }
        let grid = BuildGridExec::start(&[WorkerMode::Normal]).unwrap();
        let start = Instant::now();
        while !grid.worker_logs().contains("session") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no bot session in 30 s:\n{}\n{}",
                grid.worker_logs(),
                grid.server_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let (port, folder) = (grid.port, grid.dir().to_path_buf());
        drop(grid);
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the server outlived its harness"
        );
        assert!(!folder.exists());
    }
}
