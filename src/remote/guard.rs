//! What every network backend shares, so that a remote that is down or slow costs a
//! build seconds, once: retries with backoff for failures worth another try, a budget of
//! time for the whole run, and a circuit breaker that gives the remote up for the rest
//! of the run at its first timeout (every later request then fails at once).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::settings::{RemoteSettings, Timeouts};
use crate::error::{Error, RemoteFailure, Result};

/// The outcome of one attempt at a request.
pub(super) enum Attempt<T> {
    /// The answer (`None` where the server does not have the thing asked for).
    Done(T),
    /// Worth another try: refused or reset connections, 5xx, a transfer cut short.
    Retry(String),
    /// A clock ran out: the remote is too slow to wait for in this run.
    TimedOut(String),
    /// Final.
    Fail(Error),
}

/// Retries, budget and breaker of one opened remote.
pub(super) struct Guard {
    /// Shown in messages.
    hint: String,
    retries: u32,
    give_up_after: Duration,
    pub(super) timeouts: Timeouts,
    tripped: AtomicBool,
    why: Mutex<Option<String>>,
    opened: Instant,
    budget: Duration,
}

impl Guard {
    /// A guard with the settings' clocks; `hint` says what to check when the remote
    /// cannot be reached.
    pub(super) fn new(settings: &RemoteSettings, hint: impl Into<String>) -> Guard {
        Guard {
            hint: hint.into(),
            retries: settings.retries,
            give_up_after: settings.give_up_after,
            timeouts: settings.timeouts,
            tripped: AtomicBool::new(false),
            why: Mutex::new(None),
            opened: Instant::now(),
            budget: settings.budget,
        }
    }

    /// Gives the remote up for the rest of the run.
    pub(super) fn trip(&self, why: &str) {
        if let Ok(mut w) = self.why.lock() {
            w.get_or_insert_with(|| why.to_string());
        }
        self.tripped.store(true, Ordering::SeqCst);
    }

    /// Why the remote was given up, if it was.
    pub(super) fn given_up(&self) -> Option<String> {
        if !self.tripped.load(Ordering::SeqCst) {
            return None;
        }
        Some(
            self.why
                .lock()
                .ok()
                .and_then(|w| w.clone())
                .unwrap_or_else(|| "it timed out".into()),
        )
    }

    /// The time left of the run's budget.
    pub(super) fn left(&self) -> Duration {
        self.budget.saturating_sub(self.opened.elapsed())
    }

    /// The error of a remote that cannot be reached, at `url`.
    pub(super) fn unreachable(&self, url: &str, message: String) -> Error {
        Error::Remote {
            url: url.to_string(),
            message,
            failure: RemoteFailure::Unreachable,
            hint: Some(self.hint.clone()),
        }
    }

    /// Runs `attempt` (given the time left of the budget) until it is done, fails, or
    /// has been retried as often or as long as the settings allow. `what` names the
    /// request and `url` where it went, for messages.
    pub(super) fn run<T>(
        &self,
        what: &str,
        url: &str,
        mut attempt: impl FnMut(Duration) -> Attempt<T>,
    ) -> Result<T> {
        let start = Instant::now();
        let mut tries = 0;
        loop {
            if let Some(why) = self.given_up() {
                return Err(self.unreachable(
                    url,
                    format!("not asked: the remote was given up for this run ({why})"),
                ));
            }
            let left = self.left();
            if left.is_zero() {
                let why = format!(
                    "the run's remote budget of {} s is spent",
                    secs(self.budget)
                );
                self.trip(&why);
                return Err(self.unreachable(
                    url,
                    format!(
                        "{what} not sent: {why}; kart stops waiting on this remote for the rest of this run"
                    ),
                ));
            }
            match attempt(left) {
                Attempt::Done(result) => return Ok(result),
                Attempt::Fail(e) => return Err(e),
                Attempt::TimedOut(why) => {
                    self.trip(&why);
                    return Err(self.unreachable(
                        url,
                        format!(
                            "{what} timed out: {why}; kart stops waiting on this remote for the rest of this run"
                        ),
                    ));
                }
                Attempt::Retry(why) => {
                    let pause = backoff(tries);
                    if tries >= self.retries || start.elapsed() + pause > self.give_up_after {
                        return Err(self.unreachable(
                            url,
                            format!(
                                "{what} failed {} times in {:.1} s: {why}",
                                tries + 1,
                                start.elapsed().as_secs_f64()
                            ),
                        ));
                    }
                    std::thread::sleep(pause);
                    tries += 1;
                }
            }
        }
    }

    /// Runs `work` on a thread of its own and waits for it no longer than a request
    /// moving `bytes` would get (and the run's budget): for a shared folder, which is
    /// often a network mount where a read can hang for minutes. Work that does not
    /// finish in time gives the remote up for the run, as a timeout over the network
    /// does; its thread is left to finish or die with the process.
    pub(super) fn bounded<T: Send + 'static>(
        &self,
        url: &str,
        bytes: u64,
        work: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if let Some(why) = self.given_up() {
            return Err(self.unreachable(
                url,
                format!("not read: the remote was given up for this run ({why})"),
            ));
        }
        let wait = self.timeouts.deadline(bytes).min(self.left());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("kart-remote-io".into())
            .spawn(move || {
                let _ = tx.send(work());
            })
            .map_err(|e| self.unreachable(url, format!("cannot start a reader thread: {e}")))?;
        match rx.recv_timeout(wait) {
            Ok(result) => result,
            Err(_) => {
                let why = format!("a read did not finish in {:.1} s", wait.as_secs_f64());
                self.trip(&why);
                Err(self.unreachable(
                    url,
                    format!("{why}; kart stops waiting on this remote for the rest of this run"),
                ))
            }
        }
    }
}

/// Seconds as people write them: `5`, `0.5`.
pub(super) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// 100 ms, 200 ms, 400 ms … capped at 5 s, each scaled by a random factor in [0.5, 1)
/// so that parallel transfers do not retry in lockstep.
fn backoff(attempt: u32) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1 << attempt.min(6));
    let capped = base.min(Duration::from_secs(5));
    capped.mul_f64(0.5 + 0.5 * jitter())
}

/// A number in [0, 1) from the clock and the thread (no need for a random crate).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_bounded() {
        assert!(backoff(0) <= Duration::from_millis(100));
        assert!(backoff(3) >= Duration::from_millis(400));
        assert!(backoff(30) <= Duration::from_secs(5));
    }

    #[test]
    fn work_that_hangs_gives_the_remote_up_at_its_deadline() {
        let mut settings = RemoteSettings::new("file:///nowhere");
        settings.timeouts.first_byte = Duration::from_millis(200);
        settings.timeouts.stall = Duration::from_millis(100);
        let guard = Guard::new(&settings, "check it");
        let start = Instant::now();
        let err = guard
            .bounded("here", 0, || {
                std::thread::sleep(Duration::from_secs(5));
                Ok(())
            })
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(err.to_string().contains("did not finish in 0.3 s"), "{err}");
        // Given up: the next request fails at once, without waiting again.
        let err = guard.run("GET", "here", |_| Attempt::Done(())).unwrap_err();
        assert!(err.to_string().contains("given up"), "{err}");
    }
}
