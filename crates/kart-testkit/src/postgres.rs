//! A throwaway PostgreSQL server for tests: BuildGrid's scheduler (the execution
//! service) keeps its jobs and bots in PostgreSQL and refuses SQLite. `initdb` in a
//! fresh temp folder, `postgres` on a free port of 127.0.0.1 only (its socket in the
//! same folder), no durability (fsync off), stopped and deleted when dropped.
//!
//! PostgreSQL refuses to run as root: as root, the folder is given to the `postgres`
//! user of the image and both programs run as that user; otherwise as the current one.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running PostgreSQL; stopped (immediate shutdown, then its whole process group
/// killed) on drop.
pub struct Postgres {
    child: Child,
    dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
}

/// The folder holding `initdb` and `postgres`, if installed: PATH first, then Debian's
/// versioned folders.
pub fn bin_dir() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            let mut v: Vec<PathBuf> = d
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect();
            v.sort();
            v.reverse();
            v
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(debian)
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
}

/// The uid and gid of `user` from /etc/passwd.
fn user_ids(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&user) || fields.len() < 4 {
            return None;
        }
        Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
    })
}

/// Whether this process runs as root (owns `/proc/self` as uid 0).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl Postgres {
    /// Starts a fresh server; an error says what failed and what to install.
    pub fn start() -> Result<Postgres, String> {
        let bin = bin_dir().ok_or(
            "PostgreSQL is not installed (no initdb and postgres on PATH or under /usr/lib/postgresql): \
             run scripts/test, or `apt-get install postgresql`",
        )?;
        let ids = if is_root() {
            Some(user_ids("postgres").ok_or(
                "running as root, and PostgreSQL refuses root: no `postgres` user in /etc/passwd \
                 (`apt-get install postgresql` creates it)",
            )?)
        } else {
            None
        };
        let io = |what: &str, e: std::io::Error| format!("postgres harness: cannot {what}: {e}");
        let dir = tempfile::Builder::new()
            .prefix("kart-postgres-")
            .tempdir()
            .map_err(|e| io("create a temp folder", e))?;
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| io("give the temp folder to `postgres`", e))?;
        }
        let as_user = |cmd: &mut Command| {
            if let Some((uid, gid)) = ids {
                cmd.uid(uid).gid(gid);
            }
        };
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .current_dir(dir.path())
            .stdin(Stdio::null());
        as_user(&mut initdb);
        let out = initdb.output().map_err(|e| io("run initdb", e))?;
        if !out.status.success() {
            return Err(format!(
                "postgres harness: initdb failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| io("find a free port", e))?
                .port();
            let log = std::fs::File::create(dir.path().join("postgres.log"))
                .map_err(|e| io("create the log", e))?;
            let log2 = log.try_clone().map_err(|e| io("open the log", e))?;
            let mut cmd = Command::new(bin.join("postgres"));
            cmd.arg("-D")
                .arg(&data)
                .arg("-k")
                .arg(dir.path())
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
                .args(["-c", "dynamic_shared_memory_type=mmap"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .process_group(0);
            as_user(&mut cmd);
            let mut child = cmd.spawn().map_err(|e| io("start postgres", e))?;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(Postgres { child, dir, port });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken in between: try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            stop(&mut child);
        }
        Err(format!(
            "postgres did not start on loopback (five tries); its log:\n{}",
            std::fs::read_to_string(dir.path().join("postgres.log")).unwrap_or_default()
        ))
    }

    /// The SQLAlchemy URL of the `postgres` database through psycopg2, as BuildGrid
    /// takes it.
    pub fn url(&self) -> String {
        format!(
            "postgresql+psycopg2://postgres@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// The server's folder (data, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Immediate shutdown (SIGQUIT: the postmaster stops its backends and removes its
/// shared memory), then SIGKILL to whatever of its process group is left.
fn stop(child: &mut Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals the postmaster this harness started.
    unsafe {
        libc::kill(pid, libc::SIGQUIT);
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kills the process group the postmaster leads.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Postgres {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
