//! How to reach a remote and what it may do: its URL and clocks, as kart.toml, the
//! environment and the command line give them, and where the bearer token may go.

use std::time::Duration;

use crate::error::{Error, Result};

/// How long each phase of a request may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    /// Until the TCP (and TLS) connection is up.
    pub connect: Duration,
    /// From sending the request until the answer's headers are in. An upload gets one
    /// `stall` more per MiB it sends.
    pub first_byte: Duration,
    /// A transfer that moves less than [`MIN_PROGRESS_BYTES`] in this long is stalled.
    pub stall: Duration,
    /// The slowest rate worth waiting for, bytes per second: a request's total deadline
    /// is `first_byte` and one `stall` period plus its size at this rate, so a server
    /// that keeps a transfer barely alive (a kilobyte a second, never a stall) is given
    /// up all the same, while a transfer that stops is still named a stall.
    pub min_rate: u64,
}

impl Timeouts {
    /// The whole request's deadline for `bytes` to move.
    pub fn deadline(&self, bytes: u64) -> Duration {
        self.first_byte
            + self.stall
            + Duration::from_secs_f64(bytes as f64 / self.min_rate.max(1) as f64)
    }
}

impl Default for Timeouts {
    /// 3 s to connect, 5 s to the first byte, 5 s of stall: a cache on a LAN or in the
    /// same cloud region answers in milliseconds, so a build loses at most seconds to
    /// one that does not.
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(3),
            first_byte: Duration::from_secs(5),
            stall: Duration::from_secs(5),
            min_rate: 1 << 20,
        }
    }
}

/// The least a transfer must move per `stall` period to count as moving.
pub const MIN_PROGRESS_BYTES: usize = 1024;

/// The environment variable holding the remote's URL (overrides kart.toml).
pub const REMOTE_ENV: &str = "KART_REMOTE";

/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "KART_REMOTE_TOKEN";

/// Names the one remote URL `KART_REMOTE_TOKEN` is for, when that URL is kart.toml's
/// rather than one given with the token through `--remote` or `KART_REMOTE`.
pub const TOKEN_URL_ENV: &str = "KART_REMOTE_TOKEN_URL";

/// The environment variable that makes an object-store remote anonymous (`1`): unsigned
/// requests, read-only (`0` turns off kart.toml's `anonymous = true`).
pub const ANONYMOUS_ENV: &str = "KART_REMOTE_ANONYMOUS";

/// The value of [`ANONYMOUS_ENV`]: `Some(true)` for `1`/`true`/`yes`, `Some(false)`
/// for `0`/`false`/`no`, `None` when unset or empty; anything else is a usage error.
pub fn anonymous_from_env(value: Option<&str>) -> Result<Option<bool>> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(Some(true)),
        "0" | "false" | "no" => Ok(Some(false)),
        _ => Err(Error::usage(
            format!("{ANONYMOUS_ENV}=`{v}` is neither 1 nor 0"),
            Some(format!(
                "set {ANONYMOUS_ENV}=1 for unsigned, read-only requests, 0 (or nothing) for signed ones"
            )),
        )),
    }
}

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
    if matches!(parsed.scheme(), "http" | "grpc") && !loopback {
        return Err(format!(
            "{TOKEN_ENV} is not sent to {}: plain text (http, grpc) would show it to the network; use https or grpcs",
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
        // gRPC alike: grpc is plain text, grpcs is TLS.
        let far = "grpc://cache.example:8980/main";
        assert!(token_allowed(far, Some(far), None).is_err());
        let tls = "grpcs://cache.example/main";
        assert!(token_allowed(tls, Some(tls), None).is_ok());
        let near = "grpc://127.0.0.1:8980";
        assert!(token_allowed(near, Some(near), None).is_ok());
        assert!(token_allowed(near, None, None).is_err());
    }
}

/// How to reach a remote and what it may do.
#[derive(Clone, Debug)]
pub struct RemoteSettings {
    /// `http://…`, `https://…`, `file://…`, `s3://…`, `gs://…` or `az://…`.
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
    /// An S3 remote's endpoint (`https://host:port`; default: `AWS_ENDPOINT_URL`, else
    /// AWS itself).
    pub endpoint: Option<String>,
    /// An S3 remote's region (default: `AWS_REGION`, `AWS_DEFAULT_REGION`, `us-east-1`).
    pub region: Option<String>,
    /// Unsigned requests to an object store (a public bucket, read by pull requests):
    /// the remote is then read-only.
    pub anonymous: bool,
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
            endpoint: None,
            region: None,
            anonymous: false,
        }
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
