//! Running a child process under a timeout, its whole process group killed on expiry,
//! with stdout and stderr read concurrently (so a chatty child never blocks on a full
//! pipe) and without waiting forever for a grandchild that keeps the pipes open.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
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
///
/// One thread does all the waiting, without polling: `poll(2)` on the two pipes and on
/// a pidfd of the child (Linux 5.3 and later), which becomes readable when it exits, so
/// a compile costs kart no wake-up but for its output and its end. Where no pidfd can
/// be had, the same loop looks at the child every 5 ms.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> std::io::Result<ProcessOutcome> {
    let start = Instant::now();
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pgid = child.id() as libc::pid_t;
    tell_reaper('+', pgid);
    let exited = pidfd(pgid);
    let mut pipes = [
        Pipe::new(child.stdout.take().map(OwnedFd::from)),
        Pipe::new(child.stderr.take().map(OwnedFd::from)),
    ];
    let deadline = start + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            kill_group(pgid);
            let _ = child.wait();
            break None;
        }
        let wait = match &exited {
            Some(_) => deadline - now,
            None => (deadline - now).min(Duration::from_millis(5)),
        };
        wait_and_read(exited.as_ref(), &mut pipes, wait);
    };
    // Whatever the child left behind in its group goes too.
    kill_group(pgid);
    tell_reaper('-', pgid);

    let drain_deadline = Instant::now() + DRAIN_GRACE;
    while pipes.iter().any(|p| p.fd.is_some()) {
        let now = Instant::now();
        if now >= drain_deadline {
            break;
        }
        wait_and_read(None, &mut pipes, drain_deadline - now);
    }
    let [stdout, stderr] = pipes;
    Ok(ProcessOutcome {
        status,
        timed_out,
        stdout: String::from_utf8_lossy(&stdout.bytes).into_owned(),
        stderr: String::from_utf8_lossy(&stderr.bytes).into_owned(),
        elapsed: start.elapsed(),
    })
}

/// One of the child's output pipes and what it has written so far; `fd` is `None`
/// once the pipe is at its end (or failed).
struct Pipe {
    fd: Option<OwnedFd>,
    bytes: Vec<u8>,
}

impl Pipe {
    fn new(fd: Option<OwnedFd>) -> Pipe {
        Pipe {
            fd,
            bytes: Vec::new(),
        }
    }
}

/// A pidfd of `pid`, readable once it has exited; `None` where the kernel has none.
fn pidfd(pid: libc::pid_t) -> Option<OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = std::os::fd::RawFd::try_from(fd)
            .ok()
            .filter(|&fd| fd >= 0)?;
        // SAFETY: `fd` was just opened and nothing else owns it.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Waits up to `wait` for output on `pipes` or for `exited` to become readable, and
/// reads what is there (once per ready pipe: a pipe's read returns what it holds
/// without blocking). A pipe at its end, or failing, is closed.
fn wait_and_read(exited: Option<&OwnedFd>, pipes: &mut [Pipe; 2], wait: Duration) {
    let fd_of = |fd: Option<&OwnedFd>| fd.map_or(-1, |fd| fd.as_raw_fd());
    let mut fds = [exited, pipes[0].fd.as_ref(), pipes[1].fd.as_ref()].map(|fd| libc::pollfd {
        fd: fd_of(fd),
        events: libc::POLLIN,
        revents: 0,
    });
    // Rounded up: a deadline less than a millisecond away must not spin.
    let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is an array of initialized pollfds of the length passed; a negative
    // fd is ignored.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if ready <= 0 {
        // A timeout, or a signal: the caller looks at the child and the clock again.
        return;
    }
    for (pipe, polled) in pipes.iter_mut().zip(&fds[1..]) {
        if polled.revents == 0 {
            continue;
        }
        let Some(fd) = &pipe.fd else { continue };
        let mut chunk = [0u8; 16 * 1024];
        // SAFETY: reads at most `chunk.len()` bytes into `chunk` from an open fd.
        let n = unsafe { libc::read(fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
        match usize::try_from(n) {
            Ok(0) => pipe.fd = None,
            Ok(n) => pipe.bytes.extend_from_slice(&chunk[..n]),
            Err(_) if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
            }
            Err(_) => pipe.fd = None,
        }
    }
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
    fn reads_both_pipes_past_their_buffers() {
        // 1 MiB to each pipe, alternating: a reader that waited on one pipe while the
        // child blocked on the other (a pipe holds 64 KiB) would never finish.
        let script = "i=0; while [ $i -lt 64 ]; do head -c 16384 /dev/zero | tr '\\0' o; \
                      head -c 16384 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done; exit 5";
        let out = run_with_timeout(
            Command::new("sh").args(["-c", script]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(!out.timed_out);
        assert_eq!(out.status.and_then(|s| s.code()), Some(5));
        assert_eq!(out.stdout.len(), 1 << 20);
        assert_eq!(out.stderr.len(), 1 << 20);
        assert!(out.stdout.bytes().all(|b| b == b'o'));
        assert!(out.stderr.bytes().all(|b| b == b'e'));
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
