//! Named failpoints for crash tests: with `KART_FAILPOINT=NAME` (or `NAME:DETAIL`, for
//! one item such as one digest) kart aborts the process at that point, as a `kill -9`
//! or a crashing driver would. Unset, a failpoint costs one environment lookup; none
//! sits on the run-time load path.

/// The environment variable naming the failpoint to trigger.
pub const FAILPOINT_ENV: &str = "KART_FAILPOINT";

/// Aborts the process when `KART_FAILPOINT` names this point (`name`, or
/// `name:detail`).
pub fn hit(name: &str, detail: &str) {
    let Ok(wanted) = std::env::var(FAILPOINT_ENV) else {
        return;
    };
    let matches = match wanted.split_once(':') {
        Some((n, d)) => n == name && d == detail,
        None => wanted == name,
    };
    if matches {
        eprintln!("kart: failpoint `{wanted}` reached: aborting");
        std::process::abort();
    }
}
