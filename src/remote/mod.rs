//! Remote caches: where artifacts go beyond one machine. Each kind of server is one
//! [`Storage`] in a file of its own: [`http`] (bazel-remote's HTTP layout, nginx
//! WebDAV), [`folder`] (a shared folder), and [`layered`] puts the local store in
//! front of any of them. [`Remote`] is an opened one with what the project says it may
//! do (trusted, read-only); [`transfer`] copies blobs and entries between two storages
//! (`kart fetch`, `kart push`, the build's `--push`).
//!
//! Nothing a remote sends is trusted: a blob is checked against the digest it was asked
//! for (and the size the lock gives) before anyone sees it, an action entry is
//! validated, every body is bounded, and every name is a validated hex digest, so no
//! answer can make kart write outside its store. Failures worth another try are retried
//! with backoff within a time bound; the first timeout gives the remote up for the rest
//! of the run, so a silent server costs one timeout, not one per artifact
//! ([`guard`]).

mod folder;
mod guard;
mod http;
pub mod layered;
pub mod transfer;

pub use http::{MIN_PROGRESS_BYTES, Timeouts};

use std::time::Duration;

use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, RemoteFailure, Result};
use crate::store::{ActionEntry, Storage};

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

/// Blobs whose size is not known in advance are refused above this.
const MAX_BLOB_BYTES: u64 = 1 << 30;

/// How to reach a remote and what it may do.
#[derive(Clone, Debug)]
pub struct RemoteSettings {
    /// `http://…`, `https://…`, `file://…`, `s3://…` or `grpc://…`.
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

/// An opened remote cache: one [`Storage`] and what this run may do with it.
pub struct Remote {
    storage: Box<dyn Storage>,
    shown: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never written to.
    pub read_only: bool,
    /// Parallel transfers.
    pub jobs: usize,
}

impl std::fmt::Debug for Remote {
    // By hand: no credential may reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.shown)
            .field("trusted", &self.trusted)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Opens the remote `settings.url` names (no request is made). `token` is sent as a
    /// bearer token over HTTP.
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
        let storage: Box<dyn Storage> = match url.scheme() {
            "http" | "https" => Box::new(
                http::HttpStorage::open(settings, base, shown.clone(), token).map_err(bad)?,
            ),
            "file" => Box::new(folder::FolderStorage::open(
                settings,
                url.to_file_path()
                    .map_err(|()| bad("not an absolute local path".into()))?,
                shown.clone(),
            )),
            other => return Err(bad(format!("scheme `{other}` is not supported"))),
        };
        Ok(Remote {
            storage,
            shown,
            trusted: settings.trusted,
            read_only: settings.read_only,
            jobs: settings.jobs.max(1),
        })
    }

    /// The URL, without credentials or query (safe to print).
    pub fn url(&self) -> &str {
        &self.shown
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::usage(
                format!("remote {} is read-only", self.shown),
                Some("drop --read-only / `read_only = true` to write to it".into()),
            ));
        }
        Ok(())
    }
}

impl Storage for Remote {
    fn location(&self) -> String {
        self.shown.clone()
    }
    fn has_blob(&self, digest: &str, size: Option<u64>) -> Result<bool> {
        self.storage.has_blob(digest, size)
    }
    fn missing_blobs(&self, blobs: &[(&str, u64)]) -> Result<Vec<String>> {
        self.storage.missing_blobs(blobs)
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        self.storage.get_blob(digest, size)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        self.writable()?;
        self.storage.put_blob(digest, bytes)
    }
    fn has_entry(&self, key: &str) -> Result<bool> {
        self.storage.has_entry(key)
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        self.storage.get_entry(key)
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        self.writable()?;
        self.storage.put_entry(entry)
    }
}

/// Checks bytes a remote sent at `url` as blob `digest`: exactly `size` bytes where the
/// size is known (the lock's), and hashing to `digest`. A mismatch is an error, and the
/// caller drops the bytes.
fn check_blob(url: &str, digest: &str, size: Option<u64>, bytes: &[u8]) -> Result<()> {
    let corrupt = |message: String| {
        Error::Remote {
        url: url.to_string(),
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
    let actual = sha256_hex(bytes);
    if actual != digest {
        return Err(corrupt(format!(
            "sent bytes hashing to {actual} for blob {digest}"
        )));
    }
    Ok(())
}

/// Parses and validates an action entry a remote sent at `url` for `key`; `Ok(None)` for
/// an entry of another format version (a miss).
fn parse_entry(url: &str, key: &str, bytes: &[u8]) -> Result<Option<ActionEntry>> {
    ActionEntry::parse(bytes, key).map_err(|message| Error::Remote {
        url: url.to_string(),
        message: format!("invalid action entry: {message}"),
        failure: RemoteFailure::Corrupt,
        hint: Some("ignored; the artifact is compiled locally".into()),
    })
}

/// An action entry as remotes keep it (JSON).
fn encode_entry(url: &str, entry: &ActionEntry) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(entry).map_err(|e| Error::Remote {
        url: url.to_string(),
        message: format!("cannot encode entry: {e}"),
        failure: RemoteFailure::Refused,
        hint: None,
    })
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

fn too_large(shown: &str, limit: u64) -> Error {
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
    fn a_read_only_remote_refuses_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = RemoteSettings::new(format!("file://{}", dir.path().display()));
        settings.read_only = true;
        let remote = Remote::open(&settings, None).unwrap();
        let digest = sha256_hex(b"x");
        let err = remote.put_blob(&digest, b"x").unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        assert!(!dir.path().join("cas").exists());
    }
}
