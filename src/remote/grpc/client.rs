//! The connection to one REAPI v2 server and what every call shares: the token, the
//! runtime the async stack runs on, the guard's deadlines and retries, and how a
//! failed call is read. The calls themselves are in `cas` and `action`.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2::capabilities_client::CapabilitiesClient;
use bazel_remote_apis::build::bazel::remote::execution::v2::content_addressable_storage_client::ContentAddressableStorageClient;
use tonic::Code;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::address::parse_address;
use super::digest::{Capabilities, DEFAULT_MAX_BATCH_BYTES};
use super::proto;
use super::text::{message_limit, status_text};
use crate::error::{Error, RemoteFailure, Result};
use crate::remote::guard::{Attempt, Guard, secs};
use crate::remote::settings::{RemoteSettings, TOKEN_ENV, Timeouts, strip_credentials};

/// A REAPI v2 server: its CAS, action cache, ByteStream and execution services.
pub struct GrpcClient {
    pub(super) shown: String,
    pub(super) instance: String,
    auth: Option<AsciiMetadataValue>,
    pub(super) channel: Channel,
    runtime: tokio::runtime::Runtime,
    capabilities: Mutex<Option<Capabilities>>,
    pub(super) guard: Guard,
    pub(super) timeouts: Timeouts,
}

impl std::fmt::Debug for GrpcClient {
    // By hand: the token must not reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcClient")
            .field("url", &self.shown)
            .field("instance", &self.instance)
            .field("token", &self.auth.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl GrpcClient {
    /// A client of the server `settings.url` names (`grpc://host:port/instance` or
    /// `grpcs://…`), with the settings' clocks, retries and budget. No request is made
    /// and no connection opened until the first call. `token`, if any, goes with every
    /// call as a bearer token (whether it may go to this server is the caller's
    /// question: [`token_allowed`](crate::remote::token_allowed)).
    pub fn open(settings: &RemoteSettings, token: Option<String>) -> Result<GrpcClient> {
        let shown = strip_credentials(settings.url.trim_end_matches('/'));
        let bad = |why: String| {
            Error::usage(
                format!("remote URL `{shown}`: {why}"),
                Some("use grpc://host:port/instance or grpcs://host:port/instance (the instance is optional)".into()),
            )
        };
        let address = parse_address(&settings.url).map_err(bad)?;
        let auth = match token.filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => {
                let mut value =
                    AsciiMetadataValue::try_from(format!("Bearer {t}")).map_err(|_| {
                        bad(format!(
                            "{} holds characters a gRPC header cannot carry",
                            TOKEN_ENV
                        ))
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kart-grpc")
            .enable_all()
            .build()
            .map_err(|e| bad(format!("cannot start the gRPC runtime: {e}")))?;
        let mut endpoint = Endpoint::from_shared(address.uri.clone())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(settings.timeouts.connect)
            .tcp_nodelay(true)
            .user_agent(concat!("kart/", env!("CARGO_PKG_VERSION")))
            .map_err(|e| bad(e.to_string()))?;
        if address.tls {
            let tls = ClientTlsConfig::new()
                .with_native_roots()
                .domain_name(address.host.clone());
            endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
        }
        // The channel's background task lives on this runtime.
        let channel = {
            let _inside = runtime.enter();
            endpoint.connect_lazy()
        };
        Ok(GrpcClient {
            shown,
            instance: address.instance,
            auth,
            channel,
            runtime,
            capabilities: Mutex::new(None),
            guard: Guard::new(
                settings,
                "check that the server is up and the URL is right (grpc://host:port/instance; kart.toml [remote], KART_REMOTE or --remote); the timeouts are `[remote]` settings and flags (--connect-timeout, --first-byte-timeout, --stall-timeout)",
            ),
            timeouts: settings.timeouts,
        })
    }

    /// The server's URL, without credentials (safe to print).
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// The instance name (empty: the server's default).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// What the server offers, asked once and kept. A server whose CAS does not take
    /// SHA256 digests is refused (and given up for the run).
    pub fn capabilities(&self) -> Result<Capabilities> {
        if let Some(known) = self.capabilities.lock().ok().and_then(|c| c.clone()) {
            return Ok(known);
        }
        let limit = self.timeouts.deadline(0);
        let answer = self.run("GetCapabilities", limit, || async {
            let mut client = CapabilitiesClient::new(self.channel.clone())
                .max_decoding_message_size(message_limit(DEFAULT_MAX_BATCH_BYTES));
            let request = proto::GetCapabilitiesRequest {
                instance_name: self.instance.clone(),
            };
            match client.get_capabilities(self.request(request)).await {
                Ok(r) => Attempt::Done(r.into_inner()),
                Err(status) => self.failed("GetCapabilities", status),
            }
        })?;
        let capabilities = Capabilities::from_server(&answer).map_err(|why| {
            self.guard.trip(&why);
            Error::Remote {
                url: self.shown.clone(),
                message: why,
                failure: RemoteFailure::Refused,
                hint: Some(
                    "use a server (or instance) configured for SHA256 digests, the default of the API"
                        .into(),
                ),
            }
        })?;
        if let Ok(mut known) = self.capabilities.lock() {
            *known = Some(capabilities.clone());
        }
        Ok(capabilities)
    }

    /// One call under the guard: each attempt gets `limit` (and no more than the run's
    /// budget has left); running out is a timeout, which gives the remote up.
    pub(super) fn run<T, F, Fut>(&self, what: &str, limit: Duration, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.guard.run(what, &self.shown, |left| {
            let deadline = limit.min(left);
            let future = attempt();
            self.runtime.block_on(async move {
                match tokio::time::timeout(deadline, future).await {
                    Ok(attempt) => attempt,
                    Err(_) => Attempt::TimedOut(format!(
                        "no complete answer within {:.1} s (its deadline: the first-byte and stall clocks, then its size at {} KiB/s; or the run's remote budget)",
                        deadline.as_secs_f64(),
                        self.timeouts.min_rate / 1024
                    )),
                }
            })
        })
    }

    /// A request carrying the token, if any.
    pub(super) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(auth) = &self.auth {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        request
    }

    /// The most bytes one answer may hold: a full batch and its overhead.
    pub(super) fn message_limit(&self) -> usize {
        let batch = self
            .capabilities
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.max_batch_bytes))
            .unwrap_or(DEFAULT_MAX_BATCH_BYTES);
        message_limit(batch)
    }

    pub(super) fn cas(&self) -> ContentAddressableStorageClient<Channel> {
        ContentAddressableStorageClient::new(self.channel.clone())
            .max_decoding_message_size(self.message_limit())
    }

    /// `tail` under the instance name: `{instance}/blobs/…`.
    pub(super) fn resource(&self, tail: &str) -> String {
        if self.instance.is_empty() {
            tail.to_string()
        } else {
            format!("{}/{tail}", self.instance)
        }
    }

    /// What a failed call means: worth another try, a timeout, or final.
    pub(super) fn failed<T>(&self, what: &str, status: tonic::Status) -> Attempt<T> {
        let text = status_text(&status);
        // A transport failure on this side (no connection, a reset, a broken stream)
        // carries its cause; a server's answer does not.
        let local = std::error::Error::source(&status).is_some();
        match status.code() {
            Code::Unavailable if local && text.contains("timed out") => Attempt::TimedOut(format!(
                "could not connect within {} s ({text})",
                secs(self.timeouts.connect)
            )),
            Code::Unavailable | Code::ResourceExhausted | Code::Aborted => {
                Attempt::Retry(format!("{what}: {text}"))
            }
            Code::Unknown | Code::Internal | Code::Cancelled if local => {
                Attempt::Retry(format!("{what}: the connection broke off: {text}"))
            }
            Code::DeadlineExceeded => Attempt::Retry(format!("{what}: {text}")),
            Code::Unauthenticated | Code::PermissionDenied => Attempt::Fail(Error::Remote {
                url: self.shown.clone(),
                message: format!("{what} refused: {text}"),
                failure: RemoteFailure::Refused,
                hint: Some(format!(
                    "check the token in {} (set: {}) and the server's permissions",
                    TOKEN_ENV,
                    if self.auth.is_some() { "yes" } else { "no" }
                )),
            }),
            code => Attempt::Fail(Error::Remote {
                url: self.shown.clone(),
                message: format!("{what} refused: {text}"),
                failure: RemoteFailure::Refused,
                hint: matches!(
                    code,
                    Code::Unimplemented | Code::InvalidArgument | Code::NotFound
                )
                .then(|| {
                    format!(
                        "check the instance name (now {}): the URL's path, grpc://host:port/INSTANCE",
                        if self.instance.is_empty() {
                            "none".to_string()
                        } else {
                            format!("`{}`", self.instance)
                        }
                    )
                }),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_shows() {
        let client = GrpcClient::open(
            &RemoteSettings::new("grpc://127.0.0.1:9/main"),
            Some("s3cr3t".into()),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("s3cr3t"));
        assert_eq!(client.instance(), "main");
        let err = GrpcClient::open(
            &RemoteSettings::new("grpc://127.0.0.1:9/main"),
            Some("bad\ntoken".into()),
        )
        .unwrap_err();
        assert!(!err.to_string().contains("bad\ntoken"), "{err}");
    }
}
