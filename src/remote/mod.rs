//! The remote cache. Over HTTP it uses bazel-remote's layout: `{url}/cas/{sha256}` holds
//! the raw bytes whose sha256 is the name and `{url}/ac/{key}` an action entry (JSON),
//! with GET, HEAD and PUT; so one URL works with nginx's WebDAV module and with
//! bazel-remote started with `--disable_http_ac_validation`. A `file://` URL names a
//! shared folder with the same two subfolders.
//!
//! Nothing a remote sends is trusted: a blob is checked against the digest it was asked
//! for (and the size the lock gives) before anyone sees it, an action entry is
//! validated, every body is bounded, redirects are not followed, and every name is a
//! validated hex digest, so no answer can make kart write outside its store.
//!
//! Requests that cannot connect, break off or get a 5xx (or 408, 429) are retried with
//! exponential backoff and jitter, within a time bound; other 4xx fail at once. Each
//! request runs under three clocks ([`http::Timeouts`]); once one runs out, the remote
//! is given up for the rest of the run (a circuit breaker): every later request fails
//! at once, so a silent server costs one timeout, not one per artifact. The bearer
//! token is sent as a header only and appears in no message.

mod http;
pub mod layered;
pub mod transfer;

pub use http::{MIN_PROGRESS_BYTES, Timeouts};

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::{Attempt, Http, RequestParts};

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, IoContext, RemoteFailure, Result};
use crate::store::ActionEntry;
use crate::store::fsutil::write_atomic;

/// The environment variable holding the remote's URL (overrides kart.toml).
pub const REMOTE_ENV: &str = "KART_REMOTE";

/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "KART_REMOTE_TOKEN";

/// Names the one remote URL `KART_REMOTE_TOKEN` is for, when that URL is kart.toml's
/// rather than one given with the token through `--remote` or `KART_REMOTE`.
pub const TOKEN_URL_ENV: &str = "KART_REMOTE_TOKEN_URL";

/// Whether the token may go to `url`, and if not, why (for a warning). The token was
/// handed to kart for one server: it goes to the URL given with it (`given`: from
/// `--remote` or `KART_REMOTE`) or the one `KART_REMOTE_TOKEN_URL` names, never to a
/// URL that only a project's kart.toml names (a cloned repository chooses that), and
/// never in clear text (plain `http`) except to this machine.
pub fn token_allowed(
    url: &str,
    given: Option<&str>,
    token_url: Option<&str>,
) -> Result<(), String> {
    let same = |other: &str| other.trim_end_matches('/') == url.trim_end_matches('/');
    if !given.is_some_and(same) && !token_url.is_some_and(same) {
        return Err(format!(
            "{TOKEN_ENV} is not sent to {}: that URL comes from kart.toml, and the token is only \
             for the URL given with it (--remote, {REMOTE_ENV}) or named by {TOKEN_URL_ENV}",
            strip_credentials(url)
        ));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    let host = parsed.host_str().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if parsed.scheme() == "http" && !loopback {
        return Err(format!(
            "{TOKEN_ENV} is not sent to {}: plain http would show it to the network; use https",
            strip_credentials(url)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod token_tests {
    use super::token_allowed;

    #[test]
    fn the_token_goes_only_where_it_was_given() {
        let local = "http://127.0.0.1:9/kart";
        assert!(token_allowed(local, Some(local), None).is_ok());
        assert!(token_allowed(local, Some("http://127.0.0.1:9/kart/"), None).is_ok());
        // Only kart.toml names it: not sent, unless KART_REMOTE_TOKEN_URL does.
        assert!(token_allowed(local, None, None).is_err());
        assert!(token_allowed(local, None, Some(local)).is_ok());
        assert!(token_allowed(local, Some("http://127.0.0.1:10/kart"), None).is_err());
        // Clear text only to this machine.
        let far = "http://cache.example:8080/kart";
        assert!(token_allowed(far, Some(far), None).is_err());
        let tls = "https://cache.example/kart";
        assert!(token_allowed(tls, Some(tls), None).is_ok());
        assert!(token_allowed("http://[::1]:9/k", Some("http://[::1]:9/k"), None).is_ok());
        assert!(token_allowed("http://localhost:9/k", Some("http://localhost:9/k"), None).is_ok());
    }
}

/// Action entries carry nvcc's stderr and the key's preimage, but never this much.
const MAX_ENTRY_BYTES: u64 = 8 << 20;

/// Blobs whose size is not known in advance (a push's HEAD, `get_blob` without a size)
/// are refused above this.
const MAX_BLOB_BYTES: u64 = 1 << 30;

/// How to reach a remote and what it may do.
#[derive(Clone, Debug)]
pub struct RemoteSettings {
    /// `http://…`, `https://…` or `file://…`.
    pub url: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never write to it.
    pub read_only: bool,
    /// The clocks of each request.
    pub timeouts: Timeouts,
    /// Retries after the first attempt, for connection errors, broken transfers and
    /// 5xx (never for a timeout: that gives the remote up for the run).
    pub retries: u32,
    /// No retry starts this long after a request's first attempt.
    pub give_up_after: Duration,
    /// Parallel transfers (also the connection pool's size).
    pub jobs: usize,
    /// The most time one run spends on this remote: past it, the remote is given up
    /// like one that timed out.
    pub budget: Duration,
}

impl RemoteSettings {
    /// Settings for `url` with the defaults: untrusted, writable, the default
    /// [`Timeouts`], 5 retries within 30 s, 16 transfers.
    pub fn new(url: impl Into<String>) -> RemoteSettings {
        RemoteSettings {
            url: url.into(),
            trusted: false,
            read_only: false,
            timeouts: Timeouts::default(),
            retries: 5,
            give_up_after: Duration::from_secs(30),
            jobs: 16,
            budget: Duration::from_secs(600),
        }
    }
}

enum Backend {
    Http(Http),
    Folder(PathBuf),
}

/// An opened remote cache.
pub struct Remote {
    base: String,
    shown: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never written to.
    pub read_only: bool,
    /// Parallel transfers.
    pub jobs: usize,
    retries: u32,
    give_up_after: Duration,
    timeouts: Timeouts,
    backend: Backend,
    breaker: Breaker,
    opened: Instant,
    budget: Duration,
}

/// Trips on the first timeout of a run; every later request then fails at once.
#[derive(Default)]
struct Breaker {
    tripped: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Breaker {
    fn trip(&self, why: &str) {
        if let Ok(mut w) = self.why.lock() {
            w.get_or_insert_with(|| why.to_string());
        }
        self.tripped.store(true, Ordering::SeqCst);
    }

    fn why(&self) -> Option<String> {
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
}

impl std::fmt::Debug for Remote {
    // By hand: the token must never reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.shown)
            .field("trusted", &self.trusted)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Opens a remote (no request is made). `token` is sent as a bearer token over HTTP.
    pub fn open(settings: &RemoteSettings, token: Option<String>) -> Result<Remote> {
        let bad = |why: String| {
            Error::usage(
                format!("remote URL `{}`: {why}", strip_credentials(&settings.url)),
                Some("use http://host:port/path, https://… or file:///absolute/folder".into()),
            )
        };
        let url = reqwest::Url::parse(settings.url.trim_end_matches('/'))
            .map_err(|e| bad(e.to_string()))?;
        let base = url.as_str().trim_end_matches('/').to_string();
        let shown = strip_credentials(&base);
        let backend = match url.scheme() {
            "http" | "https" => {
                Backend::Http(Http::new(settings.timeouts, settings.jobs, token).map_err(bad)?)
            }
            "file" => Backend::Folder(
                url.to_file_path()
                    .map_err(|()| bad("not an absolute local path".into()))?,
            ),
            other => return Err(bad(format!("scheme `{other}` is not supported"))),
        };
        Ok(Remote {
            base,
            shown,
            trusted: settings.trusted,
            read_only: settings.read_only,
            jobs: settings.jobs.max(1),
            retries: settings.retries,
            give_up_after: settings.give_up_after,
            timeouts: settings.timeouts,
            backend,
            breaker: Breaker::default(),
            opened: Instant::now(),
            budget: settings.budget,
        })
    }

    /// The URL, without credentials or query (safe to print).
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Whether the remote holds blob `digest`.
    pub fn has_blob(&self, digest: &str) -> Result<bool> {
        self.exists("cas", digest)
    }

    /// Whether the remote holds the action entry of `key`.
    pub fn has_entry(&self, key: &str) -> Result<bool> {
        self.exists("ac", key)
    }

    /// Downloads blob `digest` and checks it: exactly `size` bytes where the size is
    /// known (the lock's), and hashing to `digest`. `Ok(None)` when the remote does not
    /// have it; a mismatch is an error and the bytes are dropped.
    pub fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        let name = checked_name(digest)?;
        let limit = size.unwrap_or(MAX_BLOB_BYTES);
        let Some(bytes) = self.get("cas", name, limit)? else {
            return Ok(None);
        };
        let corrupt = |message: String| {
            Error::Remote {
            url: format!("{}/cas/{digest}", self.shown),
            message,
            failure: RemoteFailure::Corrupt,
            hint: Some(
                "nothing was stored; remove the blob from the remote (its disk or cache may be damaged) and push it again".into(),
            ),
        }
        };
        if let Some(size) = size
            && bytes.len() as u64 != size
        {
            return Err(corrupt(format!(
                "sent {} bytes for blob {digest}, which kart.lock says has {size}",
                bytes.len()
            )));
        }
        let actual = sha256_hex(&bytes);
        if actual != digest {
            return Err(corrupt(format!(
                "sent bytes hashing to {actual} for blob {digest}"
            )));
        }
        Ok(Some(bytes))
    }

    /// Uploads blob bytes under their digest (which the caller computed or checked).
    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let name = checked_name(digest)?;
        self.put("cas", name, bytes)
    }

    /// Downloads and validates the action entry of `key`; `Ok(None)` when absent.
    pub fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        let name = checked_name(key)?;
        let Some(bytes) = self.get("ac", name, MAX_ENTRY_BYTES)? else {
            return Ok(None);
        };
        ActionEntry::parse(&bytes, key).map_err(|message| Error::Remote {
            url: format!("{}/ac/{key}", self.shown),
            message: format!("invalid action entry: {message}"),
            failure: RemoteFailure::Corrupt,
            hint: Some("ignored; the artifact is compiled locally".into()),
        })
    }

    /// Uploads an action entry.
    pub fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        let name = checked_name(&entry.key)?;
        let json = serde_json::to_vec_pretty(entry).map_err(|e| Error::Remote {
            url: self.shown.clone(),
            message: format!("cannot encode entry: {e}"),
            failure: RemoteFailure::Refused,
            hint: None,
        })?;
        self.put("ac", name, &json)
    }

    fn exists(&self, kind: &str, name: &str) -> Result<bool> {
        let name = checked_name(name)?;
        match &self.backend {
            Backend::Folder(root) => {
                let path = root.join(kind).join(name);
                let shown = self.shown.clone();
                let file = path.clone();
                self.folder_read(&path, 0, move |root| {
                    check_folder(&root, &shown)?;
                    Ok(file.is_file())
                })
            }
            Backend::Http(_) => Ok(self
                .http(reqwest::Method::HEAD, kind, name, None, 0)?
                .is_some()),
        }
    }

    fn get(&self, kind: &str, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        match &self.backend {
            Backend::Folder(root) => {
                let path = root.join(kind).join(name);
                let shown = self.shown.clone();
                let shown_path = path.clone();
                self.folder_read(&shown_path, limit, move |root| {
                    check_folder(&root, &shown)?;
                    let corrupt = |why: String| Error::Remote {
                        url: path.display().to_string(),
                        message: format!("sent a file {why}"),
                        failure: RemoteFailure::Corrupt,
                        hint: Some("nothing was stored".into()),
                    };
                    // Only a regular file: a FIFO would block the open, a device never end.
                    let file = match kart_runtime::text::open_regular(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                            return Err(corrupt(format!("that is no file: {e}")));
                        }
                        Err(e) => return Err(e).at("read", &path),
                    };
                    crate::store::fsutil::read_bounded(file, limit)
                        .map(Some)
                        .map_err(corrupt)
                })
            }
            Backend::Http(_) => self.http(reqwest::Method::GET, kind, name, None, limit),
        }
    }

    fn put(&self, kind: &str, name: &str, bytes: &[u8]) -> Result<()> {
        if self.read_only {
            return Err(Error::usage(
                format!("remote {} is read-only", self.shown),
                Some("drop --read-only / `read_only = true` to write to it".into()),
            ));
        }
        match &self.backend {
            Backend::Folder(root) => {
                check_folder(root, &self.shown)?;
                write_atomic(&root.join(kind).join(name), bytes)
            }
            Backend::Http(_) => self
                .http(reqwest::Method::PUT, kind, name, Some(bytes), 0)
                .map(|_| ()),
        }
    }

    /// Runs `read` (given the folder) on a thread of its own and waits for it no longer
    /// than an HTTP request moving `bytes` would get (and the run's remote budget): a
    /// shared folder is often a network mount, where a read can hang for minutes. A
    /// read that does not finish in time gives the remote up for the run, as a timeout
    /// over HTTP does; its thread is left to finish or die with the process.
    fn folder_read<T: Send + 'static>(
        &self,
        path: &Path,
        bytes: u64,
        read: impl FnOnce(PathBuf) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let Backend::Folder(root) = &self.backend else {
            return Err(Error::usage("not a folder remote", None));
        };
        let unreachable = |message: String| {
            Error::Remote {
            url: path.display().to_string(),
            message,
            failure: RemoteFailure::Unreachable,
            hint: Some(
                "check the shared folder's mount; the clocks are `[remote]` settings and flags (--first-byte-timeout, --stall-timeout)"
                    .into(),
            ),
        }
        };
        if let Some(why) = self.breaker.why() {
            return Err(unreachable(format!(
                "not read: the remote was given up for this run ({why})"
            )));
        }
        let left = self.budget.saturating_sub(self.opened.elapsed());
        let wait = self.timeouts.deadline(bytes).min(left);
        let (tx, rx) = std::sync::mpsc::channel();
        let root = root.clone();
        std::thread::Builder::new()
            .name("kart-folder-remote".into())
            .spawn(move || {
                let _ = tx.send(read(root));
            })
            .map_err(|e| unreachable(format!("cannot start a reader thread: {e}")))?;
        match rx.recv_timeout(wait) {
            Ok(result) => result,
            Err(_) => {
                let why = format!("a read did not finish in {:.1} s", wait.as_secs_f64());
                self.breaker.trip(&why);
                Err(unreachable(format!(
                    "{why}; kart stops waiting on this remote for the rest of this run"
                )))
            }
        }
    }

    /// One request with retries. `Ok(None)` on 404; the body of a 2xx GET otherwise.
    fn http(
        &self,
        method: reqwest::Method,
        kind: &str,
        name: &str,
        body: Option<&[u8]>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>> {
        let Backend::Http(http) = &self.backend else {
            return Err(Error::usage("not an HTTP remote", None));
        };
        let url = format!("{}/{kind}/{name}", self.base);
        let shown = format!("{}/{kind}/{name}", self.shown);
        let parts = RequestParts {
            url: &url,
            shown: &shown,
            body,
            limit,
        };
        let unreachable = |message: String| {
            Error::Remote {
            url: shown.clone(),
            message,
            failure: RemoteFailure::Unreachable,
            hint: Some("check that the cache server is up and the URL is right (kart.toml [remote], KART_REMOTE or --remote); the timeouts are `[remote]` settings and flags (--connect-timeout, --first-byte-timeout, --stall-timeout)".into()),
        }
        };
        let start = Instant::now();
        let mut attempt = 0;
        loop {
            if let Some(why) = self.breaker.why() {
                return Err(unreachable(format!(
                    "not asked: the remote was given up for this run ({why})"
                )));
            }
            let left = self.budget.saturating_sub(self.opened.elapsed());
            if left.is_zero() {
                let why = format!(
                    "the run's remote budget of {} s is spent",
                    http::secs(self.budget)
                );
                self.breaker.trip(&why);
                return Err(unreachable(format!(
                    "{method} not sent: {why}; kart stops waiting on this remote for the rest of this run"
                )));
            }
            match http.attempt(&method, &parts, left) {
                Attempt::Done(result) => return Ok(result),
                Attempt::Fail(e) => return Err(e),
                Attempt::TimedOut(why) => {
                    self.breaker.trip(&why);
                    return Err(unreachable(format!(
                        "{method} timed out: {why}; kart stops waiting on this remote for the rest of this run"
                    )));
                }
                Attempt::Retry(why) => {
                    let pause = backoff(attempt);
                    if attempt >= self.retries || start.elapsed() + pause > self.give_up_after {
                        return Err(unreachable(format!(
                            "{method} failed {} times in {:.1} s: {why}",
                            attempt + 1,
                            start.elapsed().as_secs_f64()
                        )));
                    }
                    std::thread::sleep(pause);
                    attempt += 1;
                }
            }
        }
    }
}

/// A digest or key that is safe to use as a file or URL path segment.
fn checked_name(name: &str) -> Result<&str> {
    if is_sha256_hex(name) {
        Ok(name)
    } else {
        Err(Error::usage(
            format!("`{name}` is not a sha256 digest (64 lower-case hex digits)"),
            None,
        ))
    }
}

fn check_folder(root: &Path, shown: &str) -> Result<()> {
    if root.is_dir() {
        Ok(())
    } else {
        Err(Error::Remote {
            url: shown.to_string(),
            message: "the folder does not exist".into(),
            failure: RemoteFailure::Unreachable,
            hint: Some("create it, or mount the shared folder".into()),
        })
    }
}

pub(super) fn too_large(shown: &str, limit: u64) -> Error {
    Error::Remote {
        url: shown.to_string(),
        message: format!("sent more than the {limit} bytes expected"),
        failure: RemoteFailure::Corrupt,
        hint: Some("nothing was stored".into()),
    }
}

/// `url` without user, password, query or fragment.
pub fn strip_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.as_str().trim_end_matches('/').to_string()
        }
        Err(_) => "<unparsable URL>".into(),
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

impl crate::store::Storage for Remote {
    fn location(&self) -> String {
        self.shown.clone()
    }
    fn has_blob(&self, digest: &str) -> Result<bool> {
        Remote::has_blob(self, digest)
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        Remote::get_blob(self, digest, size)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let actual = sha256_hex(bytes);
        if actual != digest {
            return Err(Error::Remote {
                url: format!("{}/cas/{digest}", self.shown),
                message: format!("not uploading bytes that hash to {actual} as blob {digest}"),
                failure: RemoteFailure::Corrupt,
                hint: None,
            });
        }
        Remote::put_blob(self, digest, bytes)
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        Remote::get_entry(self, key)
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        Remote::put_entry(self, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_queries_never_show() {
        assert_eq!(
            strip_credentials("https://user:secret@cache.example:8443/kart?token=abc#x"),
            "https://cache.example:8443/kart"
        );
        let remote = Remote::open(
            &RemoteSettings::new("http://u:p@127.0.0.1:9/kart/"),
            Some("s3cr3t".into()),
        )
        .unwrap();
        assert_eq!(remote.url(), "http://127.0.0.1:9/kart");
        assert!(!format!("{remote:?}").contains("s3cr3t"));
    }

    #[test]
    fn bad_urls_and_names_are_usage_errors() {
        for url in ["ftp://host/x", "not a url", "file://relative"] {
            let err = Remote::open(&RemoteSettings::new(url), None).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{url}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let remote = Remote::open(&RemoteSettings::new(url), None).unwrap();
        assert!(remote.get_blob("../../etc/passwd", None).is_err());
    }

    #[test]
    fn backoff_grows_and_stays_bounded() {
        assert!(backoff(0) <= Duration::from_millis(100));
        assert!(backoff(3) >= Duration::from_millis(400));
        assert!(backoff(30) <= Duration::from_secs(5));
    }

    #[test]
    fn a_folder_remote_round_trips_and_checks_digests() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let remote = Remote::open(&RemoteSettings::new(url), None).unwrap();
        let digest = sha256_hex(b"cubin");
        assert!(!remote.has_blob(&digest).unwrap());
        remote.put_blob(&digest, b"cubin").unwrap();
        assert_eq!(
            remote.get_blob(&digest, Some(5)).unwrap().unwrap(),
            b"cubin"
        );
        std::fs::write(dir.path().join("cas").join(&digest), b"CUBIN").unwrap();
        let err = remote.get_blob(&digest, Some(5)).unwrap_err();
        assert!(err.to_string().contains("hashing to"), "{err}");
        let err = remote.get_blob(&digest, Some(4)).unwrap_err();
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
    }

    #[test]
    fn a_folder_read_that_hangs_gives_the_remote_up_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = RemoteSettings::new(format!("file://{}", dir.path().display()));
        settings.timeouts.first_byte = Duration::from_millis(200);
        settings.timeouts.stall = Duration::from_millis(100);
        let remote = Remote::open(&settings, None).unwrap();
        let start = Instant::now();
        let err = remote
            .folder_read(dir.path(), 0, |_| {
                std::thread::sleep(Duration::from_secs(5));
                Ok(())
            })
            .unwrap_err();
        let took = start.elapsed();
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(err.to_string().contains("did not finish in 0.3 s"), "{err}");
        // Given up: the next read fails at once, without waiting again.
        let digest = sha256_hex(b"x");
        let err = remote.get_blob(&digest, None).unwrap_err();
        assert!(err.to_string().contains("given up"), "{err}");
        // A FIFO under a blob's name is refused at once, not waited on.
        let remote = Remote::open(
            &RemoteSettings::new(format!("file://{}", dir.path().display())),
            None,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("cas")).unwrap();
        let fifo = dir.path().join("cas").join(&digest);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let err = remote.get_blob(&digest, None).unwrap_err();
        assert!(
            err.to_string().contains("a FIFO, not a regular file"),
            "{err}"
        );
    }
}
