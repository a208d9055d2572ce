//! A remote cache over HTTP, in bazel-remote's layout: `{url}/cas/{sha256}` holds the
//! raw bytes whose sha256 is the name and `{url}/ac/{key}` an action entry (JSON), with
//! GET, HEAD and PUT; so one URL works with nginx's WebDAV module and with bazel-remote
//! started with `--disable_http_ac_validation`.
//!
//! Each request runs under three separate clocks: connecting, the first byte of the
//! answer, and a transfer that stops moving. A remote that accepts a connection and
//! never answers (or answers a byte a second) costs seconds, not the minutes a single
//! whole-request timeout would allow. reqwest's blocking client has one timeout for all
//! three, so this drives its async client on a small runtime of its own; callers stay
//! synchronous and may call from many threads at once. Redirects are not followed, and
//! the bearer token is sent as a header only and appears in no message.

use std::time::{Duration, Instant};

use super::check::{checked_name, too_large};
use super::guard::{Attempt, Guard, secs};
use super::objects::ObjectRemote;
use super::settings::{MIN_PROGRESS_BYTES, RemoteSettings, Timeouts, strip_credentials};
use crate::error::{Error, Result};

/// What a request needs besides its method and URL.
struct RequestParts<'a> {
    pub url: &'a str,
    pub shown: &'a str,
    pub body: Option<&'a [u8]>,
    /// The most bytes a GET may return.
    pub limit: u64,
}

/// The HTTP client of a remote.
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    token: Option<String>,
    timeouts: Timeouts,
}

impl Http {
    fn new(timeouts: Timeouts, jobs: usize, token: Option<String>) -> Result<Http, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(jobs.max(1))
            .user_agent(concat!("kart/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.without_url().to_string())?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kart-http")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the HTTP runtime: {e}"))?;
        Ok(Http {
            client,
            runtime,
            token: token.filter(|t| !t.is_empty()),
            timeouts,
        })
    }

    fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// One attempt, blocking the calling thread, under the request's total deadline
    /// (its size at the slowest rate worth waiting for, or `cap` if that is sooner).
    fn attempt(
        &self,
        method: &reqwest::Method,
        parts: &RequestParts<'_>,
        cap: Duration,
    ) -> Attempt<Option<Vec<u8>>> {
        let bytes = parts.body.map_or(parts.limit, |b| b.len() as u64);
        let deadline = self.timeouts.deadline(bytes).min(cap);
        self.runtime.block_on(async {
            match tokio::time::timeout(deadline, self.attempt_async(method, parts)).await {
                Ok(attempt) => attempt,
                Err(_) => Attempt::TimedOut(format!(
                    "the whole request took over {:.1} s (its deadline: the first-byte and stall clocks, then {} bytes at {} KiB/s; or the run's remote budget)",
                    deadline.as_secs_f64(),
                    bytes,
                    self.timeouts.min_rate / 1024
                )),
            }
        })
    }

    async fn attempt_async(
        &self,
        method: &reqwest::Method,
        parts: &RequestParts<'_>,
    ) -> Attempt<Option<Vec<u8>>> {
        let t = self.timeouts;
        let mut request = self.client.request(method.clone(), parts.url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut first_byte = t.first_byte;
        if let Some(body) = parts.body {
            request = request.body(body.to_vec());
            first_byte += t.stall.saturating_mul((body.len() >> 20) as u32);
        }
        let response = match tokio::time::timeout(first_byte, request.send()).await {
            Err(_) => {
                return Attempt::TimedOut(format!(
                    "no answer within {} s of sending the request",
                    secs(first_byte)
                ));
            }
            Ok(Err(e)) if e.is_connect() && e.is_timeout() => {
                return Attempt::TimedOut(format!(
                    "could not connect within {} s",
                    secs(t.connect)
                ));
            }
            // Connection refused or reset, protocol errors: worth another try.
            Ok(Err(e)) => return Attempt::Retry(describe(e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        let fail = |failure, message: String, hint: Option<String>| {
            Attempt::Fail(Error::Remote {
                url: parts.shown.to_string(),
                message,
                failure,
                hint,
            })
        };
        use crate::error::RemoteFailure;
        if status.is_success() {
            if *method != reqwest::Method::GET {
                return Attempt::Done(Some(Vec::new()));
            }
            if let Some(announced) = response.content_length()
                && announced > parts.limit
            {
                return fail(
                    RemoteFailure::Corrupt,
                    format!(
                        "announces {announced} bytes, more than the {} expected",
                        parts.limit
                    ),
                    None,
                );
            }
            return read_body(response, parts, t.stall).await;
        }
        let code = status.as_u16();
        match code {
            404 => Attempt::Done(None),
            408 | 429 | 500..=599 => Attempt::Retry(format!("{method} answered {status}")),
            300..=399 => {
                let to = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(strip_credentials)
                    .unwrap_or_default();
                fail(
                    RemoteFailure::Refused,
                    format!(
                        "{method} answered {status}, a redirect to `{to}`; kart does not follow redirects"
                    ),
                    Some("set the remote URL to the server's final address".into()),
                )
            }
            401 | 403 => fail(
                RemoteFailure::Refused,
                format!("{method} answered {status}"),
                Some(format!(
                    "check the token in {} (set: {}) and the server's permissions",
                    super::settings::TOKEN_ENV,
                    if self.has_token() { "yes" } else { "no" }
                )),
            ),
            _ => fail(
                RemoteFailure::Refused,
                format!("{method} answered {status}"),
                None,
            ),
        }
    }
}

/// Reads a body of at most `parts.limit` bytes; a body that moves less than
/// [`MIN_PROGRESS_BYTES`] in `stall` is stalled.
async fn read_body(
    mut response: reqwest::Response,
    parts: &RequestParts<'_>,
    stall: Duration,
) -> Attempt<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    let mut window_start = Instant::now();
    let mut window_bytes = 0usize;
    loop {
        let left = stall.saturating_sub(window_start.elapsed());
        let chunk = match tokio::time::timeout(left, response.chunk()).await {
            Err(_) if window_bytes == 0 => {
                return Attempt::TimedOut(format!(
                    "the transfer stalled: nothing for {} s",
                    secs(stall)
                ));
            }
            Err(_) => None,
            Ok(Err(e)) => {
                return Attempt::Retry(format!("the transfer broke off: {}", describe(e)));
            }
            Ok(Ok(None)) => return Attempt::Done(Some(bytes)),
            Ok(Ok(Some(chunk))) => Some(chunk),
        };
        if let Some(chunk) = chunk {
            window_bytes += chunk.len();
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > parts.limit {
                return Attempt::Fail(too_large(parts.shown, parts.limit));
            }
        }
        if window_start.elapsed() >= stall {
            if window_bytes < MIN_PROGRESS_BYTES {
                return Attempt::TimedOut(format!(
                    "the transfer stalled: {window_bytes} bytes in {} s",
                    secs(stall)
                ));
            }
            window_start = Instant::now();
            window_bytes = 0;
        }
    }
}

/// A reqwest error with its causes ("connection refused"), without the URL.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A remote cache over HTTP.
pub(super) struct HttpStorage {
    base: String,
    shown: String,
    client: Http,
    guard: Guard,
}

impl HttpStorage {
    /// Opens the cache at `base` (no request is made).
    pub(super) fn open(
        settings: &RemoteSettings,
        base: String,
        shown: String,
        token: Option<String>,
    ) -> std::result::Result<HttpStorage, String> {
        Ok(HttpStorage {
            base,
            shown,
            client: Http::new(settings.timeouts, settings.jobs, token)?,
            guard: Guard::new(
                settings,
                "check that the cache server is up and the URL is right (kart.toml [remote], KART_REMOTE or --remote); the timeouts are `[remote]` settings and flags (--connect-timeout, --first-byte-timeout, --stall-timeout)",
            ),
        })
    }

    /// One request with retries. `Ok(None)` on 404; the body of a 2xx GET otherwise.
    fn request(
        &self,
        method: reqwest::Method,
        kind: &str,
        name: &str,
        body: Option<&[u8]>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>> {
        let name = checked_name(name)?;
        let url = format!("{}/{kind}/{name}", self.base);
        let shown = format!("{}/{kind}/{name}", self.shown);
        let parts = RequestParts {
            url: &url,
            shown: &shown,
            body,
            limit,
        };
        self.guard.run(method.as_str(), &shown, |left| {
            self.client.attempt(&method, &parts, left)
        })
    }
}

impl ObjectRemote for HttpStorage {
    fn shown(&self) -> &str {
        &self.shown
    }
    fn exists(&self, kind: &str, name: &str) -> Result<bool> {
        Ok(self
            .request(reqwest::Method::HEAD, kind, name, None, 0)?
            .is_some())
    }
    fn read(&self, kind: &str, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.request(reqwest::Method::GET, kind, name, None, limit)
    }
    fn write(&self, kind: &str, name: &str, bytes: &[u8]) -> Result<()> {
        self.request(reqwest::Method::PUT, kind, name, Some(bytes), 0)
            .map(|_| ())
    }
}
