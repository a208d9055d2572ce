//! Named failpoints and phase markers for crash campaigns.
//!
//! With `KART_FAILPOINT=NAME` (or `NAME:DETAIL`, for one item such as one digest, or
//! `NAME@N`, for its N-th hit in the process) kart aborts the process at that point, as
//! a `kill -9` or a crashing driver would. With
//! `KART_PHASE_LOG=FILE` every point appends its name to FILE as it is reached, so a
//! campaign that kills kart at random moments can tell which phase each kill landed
//! in. Unset, a point costs two environment lookups; none sits on the run-time load
//! path.
//!
//! The points: `build.compile` (an nvcc run starts), `build.after-blob` (a blob is
//! stored, its action entry not yet), `lock.write` (the lock is about to be written),
//! `write-atomic.after-write` (temp file written, not synced), `write-atomic.before-rename`
//! (synced, not renamed), `write-atomic.after-rename`, `write-atomic.before-folder-sync`
//! (a build's blobs and entries renamed, their folders not synced yet), `fetch.download`, `fetch.store`,
//! `gc.remove`, `attest-worker`, `install.before-rename` (a toolchain install's files
//! are linked and synced, its folder not yet renamed into place).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Hits of the failpoint named in `KART_FAILPOINT` so far (for `NAME@N`).
static HITS: AtomicUsize = AtomicUsize::new(0);

/// The environment variable naming the failpoint to trigger.
pub const FAILPOINT_ENV: &str = "KART_FAILPOINT";

/// The environment variable naming the file phase markers are appended to.
pub const PHASE_LOG_ENV: &str = "KART_PHASE_LOG";

/// Marks reaching point `name` (for item `detail`): logs it when `KART_PHASE_LOG` is
/// set, and aborts the process when `KART_FAILPOINT` names it (`name`, `name:detail`,
/// or `name@n` on its n-th hit).
pub fn hit(name: &str, detail: &str) {
    if let Some(log) = std::env::var_os(PHASE_LOG_ENV)
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
    {
        // One write per line, with O_APPEND: lines of parallel threads do not interleave.
        let _ = f.write_all(format!("{name}\n").as_bytes());
    }
    let Ok(wanted) = std::env::var(FAILPOINT_ENV) else {
        return;
    };
    let matches = if let Some((n, count)) = wanted.split_once('@') {
        n == name && count.parse::<usize>().ok() == Some(HITS.fetch_add(1, Ordering::SeqCst) + 1)
    } else {
        match wanted.split_once(':') {
            Some((n, d)) => n == name && d == detail,
            None => wanted == name,
        }
    };
    if matches {
        eprintln!("kart: failpoint `{wanted}` reached: aborting");
        std::process::abort();
    }
}
