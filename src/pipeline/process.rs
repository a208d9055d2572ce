//! Running a child process under a timeout, its whole process group killed on expiry,
//! with stdout and stderr read concurrently (so a chatty child never blocks on a full
//! pipe) and without waiting forever for a grandchild that keeps the pipes open.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The environment variable that makes the kart binary a reaper (see [`reap_if_asked`]).
const REAPER_ENV: &str = "KART_REAPER";

/// Whether this process may start a reaper: only the kart binary, whose own executable
/// is one that knows [`REAPER_ENV`] (a test binary that spawned itself would run its
/// tests again).
static REAPER_ENABLED: AtomicBool = AtomicBool::new(false);

/// The reaper's stdin: `+PGID` for each group started, `-PGID` for each one done.
static REAPER: OnceLock<Option<Mutex<std::process::ChildStdin>>> = OnceLock::new();

/// Lets [`run_with_timeout`] start a reaper: called by the kart binary's `main`.
pub fn enable_reaper() {
    REAPER_ENABLED.store(true, Ordering::SeqCst);
}

/// When this process was started as a reaper, runs as one and never returns.
///
/// nvcc and its children (cicc, ptxas, the host compiler) each run in a process group
/// of their own, so that a timeout kills them all; the same makes them outlive kart
/// when kart dies: a terminal's Ctrl-C reaches only kart's group, `kill -9` no handler,
/// and `PR_SET_PDEATHSIG` would reach nvcc but not its children. So the first compile
/// starts a reaper: a second copy of kart in a group of its own, deaf to SIGINT, SIGTERM
/// and SIGHUP, told over a pipe which groups are live. The pipe closes whenever kart
/// ends, however it ends; the reaper then kills every group still live, and exits.
pub fn reap_if_asked() {
    if std::env::var_os(REAPER_ENV).is_none() {
        return;
    }
    // SAFETY: sets signal dispositions at start, before any thread exists.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut live = std::collections::BTreeSet::new();
    let mut line = String::new();
    let mut stdin = std::io::stdin().lock();
    while std::io::BufRead::read_line(&mut stdin, &mut line).is_ok_and(|n| n > 0) {
        let pgid = |sign: char| line.trim().strip_prefix(sign)?.parse::<libc::pid_t>().ok();
        if let Some(p) = pgid('+').filter(|&p| p > 1) {
            live.insert(p);
        } else if let Some(p) = pgid('-') {
            live.remove(&p);
        }
        line.clear();
    }
    for pgid in live {
        kill_group(pgid);
    }
    std::process::exit(0);
}

/// Tells the reaper (started on first use) that `pgid` is live (`+`) or done (`-`).
fn tell_reaper(sign: char, pgid: libc::pid_t) {
    if !REAPER_ENABLED.load(Ordering::SeqCst) {
        return;
    }
    let reaper = REAPER.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let child = Command::new(exe)
            .env(REAPER_ENV, "1")
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        child.stdin.map(Mutex::new)
    });
    if let Some(stdin) = reaper
        && let Ok(mut stdin) = stdin.lock()
    {
        let _ = std::io::Write::write_all(&mut *stdin, format!("{sign}{pgid}\n").as_bytes());
    }
}

/// How a child process ended.
#[derive(Debug)]
pub struct ProcessOutcome {
    /// Its exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// Whether the timeout expired.
    pub timed_out: bool,
    /// What it wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// What it wrote to stderr (lossy UTF-8).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

/// How long to wait for the pipes to close after the child is gone: long enough for
/// buffered output, short enough that an escaped grandchild cannot hold kart.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs `cmd` in a new process group; after `timeout`, kills the group (the child and
/// everything it started) with SIGKILL.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> std::io::Result<ProcessOutcome> {
    let start = Instant::now();
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pgid = child.id() as libc::pid_t;
    tell_reaper('+', pgid);
    let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
    let mut readers = 0;
    if let Some(mut out) = child.stdout.take() {
        let tx = tx.clone();
        readers += 1;
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send((false, buf));
        });
    }
    if let Some(mut err) = child.stderr.take() {
        let tx = tx.clone();
        readers += 1;
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            let _ = tx.send((true, buf));
        });
    }
    drop(tx);

    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            kill_group(pgid);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Whatever the child left behind in its group goes too.
    kill_group(pgid);
    tell_reaper('-', pgid);

    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let drain_deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..readers {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((true, buf)) => stderr = buf,
            Ok((false, buf)) => stdout = buf,
            Err(_) => break,
        }
    }
    Ok(ProcessOutcome {
        status,
        timed_out,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed: start.elapsed(),
    })
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: killpg only sends a signal; a group that no longer exists gives ESRCH.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_status() {
        let out = run_with_timeout(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.status.and_then(|s| s.code()), Some(3));
        assert!(!out.timed_out);
    }

    #[test]
    fn kills_the_group_at_the_timeout() {
        // The grandchild holds stderr open; kart must not wait for it.
        let out = run_with_timeout(
            Command::new("sh").args(["-c", "sleep 30 & echo started >&2; wait"]),
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(out.timed_out);
        assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
        assert!(out.stderr.contains("started"));
    }
}
