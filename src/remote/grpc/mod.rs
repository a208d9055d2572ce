//! A small synchronous client of the Remote Execution API (REAPI v2) over gRPC: the
//! content-addressable storage (CAS), the action cache (AC), ByteStream for blobs too
//! large for one batch, and remote execution. [`GrpcClient`] is what the `grpc://`
//! remote cache ([`super::Remote`](crate::remote::Remote)) and remote execution build on.
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
//!
//! The client is [`client`]'s [`GrpcClient`]; its calls are grouped by service: the
//! CAS and ByteStream in `cas`, the action cache and execution in `action`; digests and
//! what a server offers are in [`digest`], the URL's parts in `address`.

mod action;
mod address;
mod cas;
pub mod client;
pub mod digest;
mod text;

pub use action::ExecuteOptions;
pub use client::GrpcClient;
pub use digest::{Capabilities, DEFAULT_MAX_BATCH_BYTES, Digest};

/// The REAPI v2 messages (`Action`, `Command`, `ActionResult`, `ExecuteResponse`, …),
/// as the `bazel-remote-apis` crate generates them.
pub use bazel_remote_apis::build::bazel::remote::execution::v2 as proto;
