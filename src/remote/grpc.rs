//! A small synchronous client of the Remote Execution API (REAPI v2) over gRPC: the
//! content-addressable storage (CAS), the action cache (AC), ByteStream for blobs too
//! large for one batch, and remote execution. [`GrpcClient`] is what the `grpc://`
//! remote cache ([`super::Remote`]) and remote execution build on.
//!
//! Address: `grpc://host:port/instance` (plain text) or `grpcs://host:port/instance`
//! (TLS, the system's root certificates); the instance name is the URL's path without
//! its slashes (none: the server's default instance), the port defaults to 80 and 443.
//! A bearer token is sent as `authorization: Bearer …` metadata with every call and
//! appears in no message and no `{:?}`.
//!
//! Like the HTTP remote, the client drives an async stack (tonic) on a small runtime of
//! its own; callers stay synchronous and may call from many threads at once (one
//! HTTP/2 connection carries them all). The connection is made at the first call.
//! Every call runs under the remote's guard: a deadline per attempt (the first-byte and
//! stall clocks plus its size at the slowest rate worth waiting for, as for HTTP),
//! retries with backoff for `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `ABORTED` and broken
//! connections, and the breaker that gives the remote up for the run at the first
//! timeout. Every answer is bounded (messages by the batch limit, streams by the size
//! asked for), and every blob is checked against its digest (size and sha256) before a
//! caller sees it.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2::action_cache_client::ActionCacheClient;
use bazel_remote_apis::build::bazel::remote::execution::v2::capabilities_client::CapabilitiesClient;
use bazel_remote_apis::build::bazel::remote::execution::v2::content_addressable_storage_client::ContentAddressableStorageClient;
use bazel_remote_apis::build::bazel::remote::execution::v2::execution_client::ExecutionClient;
use bazel_remote_apis::google::bytestream::byte_stream_client::ByteStreamClient;
use bazel_remote_apis::google::bytestream::{ReadRequest, WriteRequest};
use bazel_remote_apis::google::longrunning::{Operation, operation};
use prost::Message;
use tonic::Code;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::check::{MAX_BLOB_BYTES, check_blob, too_large};
use super::guard::{Attempt, Guard, secs};
use super::{RemoteSettings, Timeouts, strip_credentials};
use crate::digest::{is_sha256_hex, sha256_hex};
use crate::error::{Error, RemoteFailure, Result};

/// The REAPI v2 messages (`Action`, `Command`, `ActionResult`, `ExecuteResponse`, …),
/// as the `bazel-remote-apis` crate generates them.
pub use bazel_remote_apis::build::bazel::remote::execution::v2 as proto;

/// The batch limit assumed when a server names none.
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 4 << 20;

/// The most of a server's batch limit the client uses: a server that allows more still
/// gets batches of at most this, so no answer is larger.
const MAX_BATCH_BYTES: u64 = 16 << 20;

/// What one blob adds to a batch message besides its bytes (digest, status, tags).
const BLOB_OVERHEAD: u64 = 160;

/// What a batch message adds besides its blobs.
const BATCH_OVERHEAD: u64 = 1024;

/// The bytes of one ByteStream write message.
const CHUNK_BYTES: usize = 1 << 20;

/// Digests asked about in one FindMissingBlobs.
const FIND_MISSING_MAX: usize = 1000;

/// The most reconnections one execution waits through (`WaitExecution` after a stream
/// that ended early), besides the guard's retries of each.
const MAX_RECONNECTIONS: u32 = 100;

/// A blob's name in the CAS: its sha256 and its size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// sha256 of the bytes, 64 lower-case hex digits.
    pub hash: String,
    /// The number of bytes.
    pub size: u64,
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest {
            hash: sha256_hex(bytes),
            size: bytes.len() as u64,
        }
    }

    /// A message's encoding and its digest (prost encodes fields in tag order, so equal
    /// messages give equal digests).
    pub fn of_message(message: &impl Message) -> (Digest, Vec<u8>) {
        let bytes = message.encode_to_vec();
        (Digest::of(&bytes), bytes)
    }

    /// The digest as the API writes it.
    pub fn to_proto(&self) -> proto::Digest {
        proto::Digest {
            hash: self.hash.clone(),
            size_bytes: i64::try_from(self.size).unwrap_or(i64::MAX),
        }
    }

    /// A digest a server sent, checked: a sha256 and a size kart would read.
    pub fn from_proto(digest: &proto::Digest) -> std::result::Result<Digest, String> {
        if !is_sha256_hex(&digest.hash) {
            return Err(format!(
                "digest {} is not a sha256 (64 lower-case hex digits)",
                crate::untrusted::quoted(&digest.hash)
            ));
        }
        match u64::try_from(digest.size_bytes) {
            Ok(size) if size <= MAX_BLOB_BYTES => Ok(Digest {
                hash: digest.hash.clone(),
                size,
            }),
            _ => Err(format!(
                "digest {} has size {}, outside 0 to {} bytes",
                digest.hash, digest.size_bytes, MAX_BLOB_BYTES
            )),
        }
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.hash, self.size)
    }
}

/// What a server said it offers (`GetCapabilities`), as far as kart uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The most bytes of blobs one batch request carries: the server's limit (4 MiB
    /// when it names none), at most 16 MiB. Larger blobs go through ByteStream.
    pub max_batch_bytes: u64,
    /// The largest blob the server takes, if it names a limit.
    pub max_blob_bytes: Option<u64>,
    /// Whether clients may write the action cache.
    pub action_cache_update: bool,
    /// Whether the server executes actions (with SHA256 digests).
    pub execution: bool,
}

impl Capabilities {
    /// The capabilities of a cache that uses SHA256; `Err` says why the server is not
    /// one kart can use.
    fn from_server(caps: &proto::ServerCapabilities) -> std::result::Result<Capabilities, String> {
        let sha256 = proto::digest_function::Value::Sha256 as i32;
        let names = |values: &[i32]| {
            values
                .iter()
                .map(|v| {
                    proto::digest_function::Value::try_from(*v)
                        .map_or_else(|_| v.to_string(), |f| f.as_str_name().to_string())
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cache = caps
            .cache_capabilities
            .as_ref()
            .ok_or("the server offers no content-addressable storage (no cache capabilities)")?;
        // An empty list is a server of API v2.0, which knew only SHA256.
        if !cache.digest_functions.is_empty() && !cache.digest_functions.contains(&sha256) {
            return Err(format!(
                "the server's CAS does not take SHA256 digests (it offers {}); kart names every blob by its sha256",
                names(&cache.digest_functions)
            ));
        }
        let max_batch_bytes = match u64::try_from(cache.max_batch_total_size_bytes) {
            Ok(0) | Err(_) => DEFAULT_MAX_BATCH_BYTES,
            Ok(n) => n.min(MAX_BATCH_BYTES),
        };
        let execution = caps.execution_capabilities.as_ref().is_some_and(|e| {
            e.exec_enabled
                && (e.digest_function == sha256
                    || e.digest_functions.contains(&sha256)
                    || (e.digest_function == 0 && e.digest_functions.is_empty()))
        });
        Ok(Capabilities {
            max_batch_bytes,
            max_blob_bytes: u64::try_from(cache.max_cas_blob_size_bytes)
                .ok()
                .filter(|&n| n > 0),
            action_cache_update: cache
                .action_cache_update_capabilities
                .as_ref()
                .is_some_and(|u| u.update_enabled),
            execution,
        })
    }

    /// Whether `blobs` (their sizes) fit one batch request.
    fn fits_batch(&self, sizes: impl IntoIterator<Item = u64>) -> bool {
        let total = sizes.into_iter().fold(BATCH_OVERHEAD, |sum, s| {
            sum.saturating_add(s + BLOB_OVERHEAD)
        });
        total <= self.max_batch_bytes
    }
}

/// How to run one [`GrpcClient::execute`].
#[derive(Clone, Debug)]
pub struct ExecuteOptions {
    /// Run the action even if the action cache has a result for it.
    pub skip_cache_lookup: bool,
    /// The most time to wait for the final answer, queueing and reconnections
    /// included (the run's remote budget may cut it shorter). Running out of it gives
    /// the remote up for the run, like any timeout.
    pub timeout: Duration,
}

/// A REAPI v2 server: its CAS, action cache, ByteStream and execution services.
pub struct GrpcClient {
    shown: String,
    instance: String,
    auth: Option<AsciiMetadataValue>,
    channel: Channel,
    runtime: tokio::runtime::Runtime,
    capabilities: Mutex<Option<Capabilities>>,
    guard: Guard,
    timeouts: Timeouts,
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

/// The parts of a `grpc://` or `grpcs://` URL.
#[derive(Debug, PartialEq)]
struct Address {
    /// `http://host:port` or `https://host:port`, for the channel.
    uri: String,
    host: String,
    tls: bool,
    instance: String,
}

/// Path segments the API's resource names use, which an instance name cannot hold.
const RESERVED: [&str; 7] = [
    "blobs",
    "uploads",
    "actions",
    "actionResults",
    "operations",
    "capabilities",
    "compressed-blobs",
];

fn parse_address(url: &str) -> std::result::Result<Address, String> {
    let parsed = reqwest::Url::parse(url.trim_end_matches('/')).map_err(|e| e.to_string())?;
    let tls = match parsed.scheme() {
        "grpc" => false,
        "grpcs" => true,
        other => return Err(format!("scheme `{other}` is not grpc or grpcs")),
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "credentials in a grpc URL are not sent; put the token in KART_REMOTE_TOKEN".into(),
        );
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("a grpc URL has no query or fragment".into());
    }
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or("no host")?
        .to_string();
    let port = parsed.port().unwrap_or(if tls { 443 } else { 80 });
    let instance = parsed.path().trim_matches('/').to_string();
    if instance.len() > 200 {
        return Err("the instance name is longer than 200 characters".into());
    }
    if !instance.is_empty() {
        for segment in instance.split('/') {
            let plain = !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !plain {
                return Err(format!(
                    "instance name {} may hold only letters, digits, `-`, `_`, `.` and single `/` between parts",
                    crate::untrusted::quoted(&instance)
                ));
            }
            if RESERVED.contains(&segment) {
                return Err(format!(
                    "instance name `{instance}` holds `{segment}`, a word of the API's resource names"
                ));
            }
        }
    }
    let uri = format!("{}://{host}:{port}", if tls { "https" } else { "http" });
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok(Address {
        uri,
        host,
        tls,
        instance,
    })
}

impl GrpcClient {
    /// A client of the server `settings.url` names (`grpc://host:port/instance` or
    /// `grpcs://…`), with the settings' clocks, retries and budget. No request is made
    /// and no connection opened until the first call. `token`, if any, goes with every
    /// call as a bearer token (whether it may go to this server is the caller's
    /// question: [`super::token_allowed`]).
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
                            super::TOKEN_ENV
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

    /// Which of `digests` the CAS lacks (`FindMissingBlobs`, a thousand digests a call).
    pub fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>> {
        let mut missing = Vec::new();
        for chunk in digests.chunks(FIND_MISSING_MAX) {
            let asked: std::collections::BTreeSet<&Digest> = chunk.iter().collect();
            let answer = self.run("FindMissingBlobs", self.timeouts.deadline(0), || async {
                let mut client = self.cas();
                let request = proto::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: chunk.iter().map(Digest::to_proto).collect(),
                    digest_function: 0,
                };
                match client.find_missing_blobs(self.request(request)).await {
                    Ok(r) => Attempt::Done(r.into_inner().missing_blob_digests),
                    Err(status) => self.failed("FindMissingBlobs", status),
                }
            })?;
            // Only what was asked counts: anything else in the answer is ignored.
            for d in answer {
                if let Ok(d) = Digest::from_proto(&d)
                    && asked.contains(&d)
                    && !missing.contains(&d)
                {
                    missing.push(d);
                }
            }
        }
        Ok(missing)
    }

    /// Blob `digest`, checked against it; `Ok(None)` when the CAS lacks it.
    pub fn read_blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ok(self
            .read_blobs(std::slice::from_ref(digest))?
            .pop()
            .flatten())
    }

    /// The blobs `digests` name, in their order, each checked against its digest
    /// (`None` for one the CAS lacks): small ones in batches (`BatchReadBlobs`), those
    /// over the batch limit through ByteStream `Read`. A blob whose bytes fail the
    /// check fails the call; nothing of it is returned.
    pub fn read_blobs(&self, digests: &[Digest]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; digests.len()];
        let mut batch: Vec<usize> = Vec::new();
        let caps = if digests.iter().any(|d| d.size > 0) {
            Some(self.capabilities()?)
        } else {
            None
        };
        for (i, d) in digests.iter().enumerate() {
            if d.size > MAX_BLOB_BYTES || !is_sha256_hex(&d.hash) {
                return Err(Error::usage(
                    format!("blob {d} is not one kart reads (a sha256 of at most 1 GiB)"),
                    None,
                ));
            }
            // The empty blob is in every CAS, stored or not.
            if d.size == 0 {
                check_blob(&self.shown, &d.hash, Some(0), &[])?;
                out[i] = Some(Vec::new());
                continue;
            }
            let Some(caps) = &caps else { continue };
            if !caps.fits_batch([d.size]) {
                out[i] = self.stream_read(d, caps)?;
                continue;
            }
            if !caps.fits_batch(batch.iter().map(|&j| digests[j].size).chain([d.size])) {
                self.batch_read(digests, &batch, caps, &mut out)?;
                batch.clear();
            }
            batch.push(i);
        }
        if let Some(caps) = &caps
            && !batch.is_empty()
        {
            self.batch_read(digests, &batch, caps, &mut out)?;
        }
        Ok(out)
    }

    /// Uploads `blobs` and returns their digests, in their order: small ones in batches
    /// (`BatchUpdateBlobs`), those over the batch limit through ByteStream `Write` in
    /// chunks. Blobs the CAS already has are sent all the same (ask
    /// [`GrpcClient::find_missing`] first to skip them).
    pub fn write_blobs(&self, blobs: &[&[u8]]) -> Result<Vec<Digest>> {
        let digests: Vec<Digest> = blobs.iter().map(|b| Digest::of(b)).collect();
        let caps = self.capabilities()?;
        let mut batch: Vec<usize> = Vec::new();
        for (i, d) in digests.iter().enumerate() {
            if let Some(max) = caps.max_blob_bytes
                && d.size > max
            {
                return Err(Error::Remote {
                    url: self.shown.clone(),
                    message: format!(
                        "blob {d} is larger than the {max} bytes the server takes (max_cas_blob_size_bytes)"
                    ),
                    failure: RemoteFailure::Refused,
                    hint: Some("raise the server's blob size limit".into()),
                });
            }
            if !caps.fits_batch([d.size]) {
                self.stream_write(d, blobs[i])?;
                continue;
            }
            if !caps.fits_batch(batch.iter().map(|&j| digests[j].size).chain([d.size])) {
                self.batch_update(&digests, blobs, &batch)?;
                batch.clear();
            }
            batch.push(i);
        }
        if !batch.is_empty() {
            self.batch_update(&digests, blobs, &batch)?;
        }
        Ok(digests)
    }

    /// The action cache's result for `action`; `Ok(None)` when it has none. The server
    /// may inline the contents of the output files named in `inline` (their bytes are
    /// not checked here: check them against their digests before use).
    pub fn get_action_result(
        &self,
        action: &Digest,
        inline: &[&str],
    ) -> Result<Option<proto::ActionResult>> {
        let limit = self.timeouts.deadline(0);
        let max = self.message_limit();
        self.run("GetActionResult", limit, || async {
            let mut client =
                ActionCacheClient::new(self.channel.clone()).max_decoding_message_size(max);
            let request = proto::GetActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action.to_proto()),
                inline_stdout: false,
                inline_stderr: false,
                inline_output_files: inline.iter().map(|s| s.to_string()).collect(),
                digest_function: 0,
            };
            match client.get_action_result(self.request(request)).await {
                Ok(r) => Attempt::Done(Some(r.into_inner())),
                Err(status) if status.code() == Code::NotFound => Attempt::Done(None),
                Err(status) => self.failed("GetActionResult", status),
            }
        })
    }

    /// Writes `result` as the action cache's result for `action` (the outputs it names
    /// must be in the CAS already: servers may check) and returns what the server
    /// stored. This replaces a result the server has; read first to keep one.
    pub fn update_action_result(
        &self,
        action: &Digest,
        result: &proto::ActionResult,
    ) -> Result<proto::ActionResult> {
        let limit = self.timeouts.deadline(result.encoded_len() as u64);
        let max = self.message_limit();
        self.run("UpdateActionResult", limit, || async {
            let mut client =
                ActionCacheClient::new(self.channel.clone()).max_decoding_message_size(max);
            let request = proto::UpdateActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action.to_proto()),
                action_result: Some(result.clone()),
                results_cache_policy: None,
                digest_function: 0,
            };
            match client.update_action_result(self.request(request)).await {
                Ok(r) => Attempt::Done(r.into_inner()),
                Err(status) => self.failed("UpdateActionResult", status),
            }
        })
    }

    /// Runs `action` (its `Action`, `Command` and input tree must be in the CAS) and
    /// returns the final `ExecuteResponse`: `Execute`, then the operation's stream of
    /// updates until it is done; a stream that ends or breaks before that is resumed
    /// with `WaitExecution` (or the action sent again if the server forgot the
    /// operation). The response's `status` and `result.exit_code` say how the action
    /// went; an operation that ends in an error is an `Err` here.
    pub fn execute(
        &self,
        action: &Digest,
        options: &ExecuteOptions,
    ) -> Result<proto::ExecuteResponse> {
        let start = Instant::now();
        let mut operation: Option<String> = None;
        let mut reconnections = 0;
        loop {
            let left = options.timeout.saturating_sub(start.elapsed());
            let name = operation.clone();
            let progress = self.run("Execute", left, || {
                let name = name.clone();
                async move { self.execute_attempt(action, options, name).await }
            })?;
            match progress {
                Progress::Finished(response) => return Ok(*response),
                Progress::Interrupted { name, why } => {
                    reconnections += 1;
                    if reconnections > MAX_RECONNECTIONS {
                        return Err(self.guard.unreachable(
                            &self.shown,
                            format!(
                                "Execute of action {action}: the operation's stream ended early {MAX_RECONNECTIONS} times (last: {why})"
                            ),
                        ));
                    }
                    operation = name;
                    std::thread::sleep(Duration::from_millis(
                        100 * u64::from(reconnections.min(10)),
                    ));
                }
            }
        }
    }

    /// One stream of an execution: `Execute` (no operation yet) or `WaitExecution`.
    async fn execute_attempt(
        &self,
        action: &Digest,
        options: &ExecuteOptions,
        operation: Option<String>,
    ) -> Attempt<Progress> {
        let mut client = ExecutionClient::new(self.channel.clone())
            .max_decoding_message_size(self.message_limit());
        let resumed = operation.is_some();
        let started = match &operation {
            Some(name) => {
                let request = proto::WaitExecutionRequest { name: name.clone() };
                client.wait_execution(self.request(request)).await
            }
            None => {
                let request = proto::ExecuteRequest {
                    instance_name: self.instance.clone(),
                    skip_cache_lookup: options.skip_cache_lookup,
                    action_digest: Some(action.to_proto()),
                    ..Default::default()
                };
                client.execute(self.request(request)).await
            }
        };
        let mut stream = match started {
            Ok(r) => r.into_inner(),
            // The server forgot the operation: send the action again.
            Err(status) if resumed && status.code() == Code::NotFound => {
                return Attempt::Done(Progress::Interrupted {
                    name: None,
                    why: "the server no longer knows the operation".into(),
                });
            }
            Err(status) => return self.failed("Execute", status),
        };
        let mut name = operation;
        loop {
            match stream.message().await {
                Ok(Some(op)) => {
                    if !op.name.is_empty() && op.name.len() <= 1024 {
                        name = Some(op.name.clone());
                    }
                    if op.done {
                        return self.finished(action, op);
                    }
                }
                Ok(None) => {
                    return match name {
                        Some(_) => Attempt::Done(Progress::Interrupted {
                            name,
                            why: "the stream ended before the operation was done".into(),
                        }),
                        None => {
                            Attempt::Retry("the stream ended before naming an operation".into())
                        }
                    };
                }
                Err(status) => {
                    let attempt: Attempt<Progress> = self.failed("Execute", status);
                    return match (attempt, name) {
                        // A broken stream of a known operation: wait for it again.
                        (Attempt::Retry(why), Some(n)) => {
                            Attempt::Done(Progress::Interrupted { name: Some(n), why })
                        }
                        (attempt, _) => attempt,
                    };
                }
            }
        }
    }

    /// The final answer of an operation that is done.
    fn finished(&self, action: &Digest, op: Operation) -> Attempt<Progress> {
        let fail = |failure, message: String| {
            Attempt::Fail(Error::Remote {
                url: self.shown.clone(),
                message: format!("Execute of action {action}: {message}"),
                failure,
                hint: None,
            })
        };
        match op.result {
            Some(operation::Result::Response(any)) => {
                if !any
                    .type_url
                    .ends_with("/build.bazel.remote.execution.v2.ExecuteResponse")
                {
                    return fail(
                        RemoteFailure::Corrupt,
                        format!(
                            "the operation's answer is a {}, not an ExecuteResponse",
                            crate::untrusted::quoted(&any.type_url)
                        ),
                    );
                }
                match proto::ExecuteResponse::decode(any.value.as_slice()) {
                    Ok(response) => Attempt::Done(Progress::Finished(Box::new(response))),
                    Err(e) => fail(
                        RemoteFailure::Corrupt,
                        format!("the ExecuteResponse does not decode: {e}"),
                    ),
                }
            }
            Some(operation::Result::Error(status)) => fail(
                RemoteFailure::Refused,
                format!(
                    "the operation failed: {}",
                    rpc_status_text(status.code, &status.message)
                ),
            ),
            None => fail(
                RemoteFailure::Corrupt,
                "the operation is done but holds no answer".into(),
            ),
        }
    }

    /// One call under the guard: each attempt gets `limit` (and no more than the run's
    /// budget has left); running out is a timeout, which gives the remote up.
    fn run<T, F, Fut>(&self, what: &str, limit: Duration, mut attempt: F) -> Result<T>
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
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(auth) = &self.auth {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        request
    }

    /// The most bytes one answer may hold: a full batch and its overhead.
    fn message_limit(&self) -> usize {
        let batch = self
            .capabilities
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.max_batch_bytes))
            .unwrap_or(DEFAULT_MAX_BATCH_BYTES);
        message_limit(batch)
    }

    fn cas(&self) -> ContentAddressableStorageClient<Channel> {
        ContentAddressableStorageClient::new(self.channel.clone())
            .max_decoding_message_size(self.message_limit())
    }

    /// `tail` under the instance name: `{instance}/blobs/…`.
    fn resource(&self, tail: &str) -> String {
        if self.instance.is_empty() {
            tail.to_string()
        } else {
            format!("{}/{tail}", self.instance)
        }
    }

    /// What a failed call means: worth another try, a timeout, or final.
    fn failed<T>(&self, what: &str, status: tonic::Status) -> Attempt<T> {
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
                    super::TOKEN_ENV,
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

    /// Reads the blobs `digests[batch]` in one `BatchReadBlobs` into `out`, checked.
    fn batch_read(
        &self,
        digests: &[Digest],
        batch: &[usize],
        caps: &Capabilities,
        out: &mut [Option<Vec<u8>>],
    ) -> Result<()> {
        let asked: Vec<&Digest> = batch.iter().map(|&i| &digests[i]).collect();
        let bytes: u64 = asked.iter().map(|d| d.size).sum();
        let max = message_limit(caps.max_batch_bytes);
        let answer = self.run("BatchReadBlobs", self.timeouts.deadline(bytes), || async {
            let mut client = ContentAddressableStorageClient::new(self.channel.clone())
                .max_decoding_message_size(max);
            let request = proto::BatchReadBlobsRequest {
                instance_name: self.instance.clone(),
                digests: asked.iter().map(|d| d.to_proto()).collect(),
                acceptable_compressors: Vec::new(),
                digest_function: 0,
            };
            let responses = match client.batch_read_blobs(self.request(request)).await {
                Ok(r) => r.into_inner().responses,
                Err(status) => return self.failed("BatchReadBlobs", status),
            };
            let mut found: Vec<(Digest, Vec<u8>)> = Vec::new();
            for r in responses {
                let Some(Ok(d)) = r.digest.as_ref().map(Digest::from_proto) else {
                    continue;
                };
                let code = r.status.as_ref().map_or(0, |s| s.code);
                if code == Code::NotFound as i32 {
                    continue;
                }
                if code != 0 {
                    let (c, m) = r
                        .status
                        .as_ref()
                        .map_or((code, ""), |s| (s.code, s.message.as_str()));
                    let text = rpc_status_text(c, m);
                    if transient(c) {
                        return Attempt::Retry(format!("BatchReadBlobs: blob {d}: {text}"));
                    }
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!("BatchReadBlobs refused blob {d}: {text}"),
                        failure: RemoteFailure::Refused,
                        hint: None,
                    });
                }
                if r.compressor != 0 {
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!(
                            "sent blob {d} compressed ({}), which kart did not ask for",
                            r.compressor
                        ),
                        failure: RemoteFailure::Corrupt,
                        hint: Some("nothing was stored".into()),
                    });
                }
                found.push((d, r.data));
            }
            Attempt::Done(found)
        })?;
        for (d, data) in answer {
            let Some(&i) = batch.iter().find(|&&i| digests[i] == d) else {
                continue;
            };
            check_blob(&self.shown, &d.hash, Some(d.size), &data)?;
            out[i] = Some(data);
        }
        Ok(())
    }

    /// Reads one blob through ByteStream `Read`; `Ok(None)` when the CAS lacks it.
    fn stream_read(&self, d: &Digest, caps: &Capabilities) -> Result<Option<Vec<u8>>> {
        let max = message_limit(caps.max_batch_bytes);
        let resource = self.resource(&format!("blobs/{}/{}", d.hash, d.size));
        let t = self.timeouts;
        let data = self.run("ByteStream.Read", t.deadline(d.size), || async {
            let mut client =
                ByteStreamClient::new(self.channel.clone()).max_decoding_message_size(max);
            let request = ReadRequest {
                resource_name: resource.clone(),
                read_offset: 0,
                read_limit: 0,
            };
            let mut stream = match tokio::time::timeout(
                t.first_byte,
                client.read(self.request(request)),
            )
            .await
            {
                Err(_) => {
                    return Attempt::TimedOut(format!(
                        "no answer within {} s of sending the request",
                        secs(t.first_byte)
                    ));
                }
                Ok(Err(status)) if status.code() == Code::NotFound => return Attempt::Done(None),
                Ok(Err(status)) => return self.failed("ByteStream.Read", status),
                Ok(Ok(r)) => r.into_inner(),
            };
            let mut bytes: Vec<u8> = Vec::with_capacity(d.size.min(64 << 20) as usize);
            loop {
                match tokio::time::timeout(t.stall, stream.message()).await {
                    Err(_) => {
                        return Attempt::TimedOut(format!(
                            "the transfer stalled: nothing for {} s",
                            secs(t.stall)
                        ));
                    }
                    Ok(Err(status)) if status.code() == Code::NotFound && bytes.is_empty() => {
                        return Attempt::Done(None);
                    }
                    Ok(Err(status)) => return self.failed("ByteStream.Read", status),
                    Ok(Ok(None)) => return Attempt::Done(Some(bytes)),
                    Ok(Ok(Some(chunk))) => {
                        if bytes.len() as u64 + chunk.data.len() as u64 > d.size {
                            return Attempt::Fail(too_large(&self.shown, d.size));
                        }
                        bytes.extend_from_slice(&chunk.data);
                    }
                }
            }
        })?;
        if let Some(bytes) = &data {
            check_blob(&self.shown, &d.hash, Some(d.size), bytes)?;
        }
        Ok(data)
    }

    /// Uploads `blobs[batch]` in one `BatchUpdateBlobs`.
    fn batch_update(&self, digests: &[Digest], blobs: &[&[u8]], batch: &[usize]) -> Result<()> {
        let bytes: u64 = batch.iter().map(|&i| digests[i].size).sum();
        self.run(
            "BatchUpdateBlobs",
            self.timeouts.deadline(bytes),
            || async {
                let mut client = self.cas();
                let request = proto::BatchUpdateBlobsRequest {
                    instance_name: self.instance.clone(),
                    requests: batch
                        .iter()
                        .map(|&i| proto::batch_update_blobs_request::Request {
                            digest: Some(digests[i].to_proto()),
                            data: blobs[i].to_vec(),
                            compressor: 0,
                        })
                        .collect(),
                    digest_function: 0,
                };
                let responses = match client.batch_update_blobs(self.request(request)).await {
                    Ok(r) => r.into_inner().responses,
                    Err(status) => return self.failed("BatchUpdateBlobs", status),
                };
                for r in responses {
                    let Some(status) = r.status else { continue };
                    if status.code == 0 {
                        continue;
                    }
                    let which = r
                        .digest
                        .as_ref()
                        .and_then(|d| Digest::from_proto(d).ok())
                        .map_or_else(|| "a blob".to_string(), |d| format!("blob {d}"));
                    let text = rpc_status_text(status.code, &status.message);
                    if transient(status.code) {
                        return Attempt::Retry(format!("BatchUpdateBlobs: {which}: {text}"));
                    }
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!("BatchUpdateBlobs refused {which}: {text}"),
                        failure: RemoteFailure::Refused,
                        hint: None,
                    });
                }
                Attempt::Done(())
            },
        )
    }

    /// Uploads one blob through ByteStream `Write`, in chunks, under a fresh upload
    /// name each attempt.
    fn stream_write(&self, d: &Digest, bytes: &[u8]) -> Result<()> {
        self.run("ByteStream.Write", self.timeouts.deadline(d.size), || async {
            let resource = self.resource(&format!("uploads/{}/blobs/{}/{}", upload_id(), d.hash, d.size));
            let mut requests = Vec::with_capacity(bytes.len() / CHUNK_BYTES + 1);
            let mut offset = 0usize;
            loop {
                let end = (offset + CHUNK_BYTES).min(bytes.len());
                requests.push(WriteRequest {
                    resource_name: if offset == 0 { resource.clone() } else { String::new() },
                    write_offset: offset as i64,
                    finish_write: end == bytes.len(),
                    data: bytes[offset..end].to_vec(),
                });
                offset = end;
                if offset == bytes.len() {
                    break;
                }
            }
            let mut client = ByteStreamClient::new(self.channel.clone())
                .max_decoding_message_size(message_limit(DEFAULT_MAX_BATCH_BYTES));
            let stream = tokio_stream::iter(requests);
            match client.write(self.request(stream)).await {
                Ok(r) => {
                    let committed = r.into_inner().committed_size;
                    // A server that had the blob may answer at once, with its size.
                    if committed == d.size as i64 {
                        Attempt::Done(())
                    } else {
                        Attempt::Retry(format!(
                            "ByteStream.Write of blob {d}: the server committed {committed} bytes"
                        ))
                    }
                }
                Err(status) if status.code() == Code::AlreadyExists => Attempt::Done(()),
                Err(status) => self.failed("ByteStream.Write", status),
            }
        })
    }
}

/// Where an execution stands after one stream.
enum Progress {
    /// The final answer.
    Finished(Box<proto::ExecuteResponse>),
    /// The stream ended first: wait for operation `name` again (`None`: execute again).
    Interrupted { name: Option<String>, why: String },
}

/// The decoding limit of messages that may carry a batch of `batch` bytes.
fn message_limit(batch: u64) -> usize {
    usize::try_from(batch.max(DEFAULT_MAX_BATCH_BYTES) + (1 << 20)).unwrap_or(usize::MAX)
}

/// Whether a status code of one blob in a batch is worth another try.
fn transient(code: i32) -> bool {
    [Code::Unavailable, Code::ResourceExhausted, Code::Aborted]
        .iter()
        .any(|c| *c as i32 == code)
}

/// A status as people read it, with the causes of a local failure, bounded and with
/// control characters escaped (a server chooses its message).
fn status_text(status: &tonic::Status) -> String {
    let mut text = rpc_status_text(status.code() as i32, status.message());
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    bounded_text(&text)
}

/// `CODE: message` of a `google.rpc.Status`.
fn rpc_status_text(code: i32, message: &str) -> String {
    let name = format!("{:?}", Code::from_i32(code));
    let message = bounded_text(message);
    if message.is_empty() {
        name
    } else {
        format!("{name}: {message}")
    }
}

fn bounded_text(text: &str) -> String {
    let mut out: String = text.chars().take(400).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    crate::untrusted::for_terminal(&out).into_owned()
}

/// A fresh upload name, a version-4 UUID (the API asks for one per upload).
fn upload_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_host_port_and_instance() {
        let a = parse_address("grpc://127.0.0.1:8980/main/").unwrap();
        assert_eq!(
            a,
            Address {
                uri: "http://127.0.0.1:8980".into(),
                host: "127.0.0.1".into(),
                tls: false,
                instance: "main".into(),
            }
        );
        let a = parse_address("grpcs://cache.example/a/b").unwrap();
        assert_eq!(
            (a.uri.as_str(), a.tls, a.instance.as_str()),
            ("https://cache.example:443", true, "a/b")
        );
        assert_eq!(parse_address("grpc://[::1]:9").unwrap().host, "::1");
        for bad in [
            "grpc://u:p@host:1/x",
            "grpc://host:1/x?token=1",
            "grpc://host:1/a//b",
            "grpc://host:1/blobs",
            "grpc://host:1/a%20b",
            "http://host:1/x",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn upload_names_are_fresh_uuids() {
        let (a, b) = (upload_id(), upload_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn servers_without_sha256_are_refused_and_limits_are_bounded() {
        let mut caps = proto::ServerCapabilities {
            cache_capabilities: Some(proto::CacheCapabilities {
                digest_functions: vec![proto::digest_function::Value::Blake3 as i32],
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = Capabilities::from_server(&caps).unwrap_err();
        assert!(err.contains("BLAKE3"), "{err}");
        let cache = caps.cache_capabilities.as_mut().unwrap();
        cache.digest_functions = vec![];
        cache.max_batch_total_size_bytes = 1 << 40;
        let c = Capabilities::from_server(&caps).unwrap();
        assert_eq!(c.max_batch_bytes, MAX_BATCH_BYTES);
        assert!(!c.action_cache_update && !c.execution);
        assert!(c.fits_batch([1000, 2000]));
        assert!(!c.fits_batch([MAX_BATCH_BYTES]));
        let cache = caps.cache_capabilities.as_mut().unwrap();
        cache.max_batch_total_size_bytes = 0;
        assert_eq!(
            Capabilities::from_server(&caps).unwrap().max_batch_bytes,
            DEFAULT_MAX_BATCH_BYTES
        );
        assert!(Capabilities::from_server(&proto::ServerCapabilities::default()).is_err());
    }

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

    #[test]
    fn digests_from_servers_are_checked() {
        let d = Digest::of(b"abc");
        assert_eq!(Digest::from_proto(&d.to_proto()).unwrap(), d);
        let mut p = d.to_proto();
        p.size_bytes = -1;
        assert!(Digest::from_proto(&p).is_err());
        p.size_bytes = 3;
        p.hash = "ABC".into();
        assert!(Digest::from_proto(&p).is_err());
    }
}
