//! An object store as a remote cache: S3 and S3-compatible servers (`s3://bucket/prefix`),
//! Google Cloud Storage (`gs://bucket/prefix`) and Azure Blob Storage
//! (`az://container/prefix`), all through the `object_store` crate and one code path.
//! The layout is the HTTP remote's: `{prefix}/cas/{sha256}` holds a blob's raw bytes and
//! `{prefix}/ac/{key}` an action entry (JSON).
//!
//! object_store runs on a small tokio runtime of this backend's own; callers stay
//! synchronous and may call from many threads at once. Its own retries are off: every
//! request goes through the remote's [`Guard`], so an object store has the HTTP
//! remote's clocks (first byte, stall, a whole deadline per attempt), retries, budget
//! and breaker, and the two never multiply.
//!
//! Writes never overwrite: each is a conditional create (`If-None-Match: *` on S3), and
//! an answer that the object exists counts as done, since a name is its content's
//! digest (or an action key, whose first entry stays). Credentials come from the
//! environment and appear in no message; an anonymous remote sends unsigned requests and
//! never writes.
//!
//! `config` reads the URL's cloud, the endpoint and the environment; `storage` makes
//! the requests; `stream` reads bodies under the clocks and says what an error means.

mod config;
mod storage;
mod stream;

pub use config::ALLOW_HTTP_ENV;
pub(super) use config::{anonymous_write, process_env};
pub(super) use storage::ObjectStorage;
