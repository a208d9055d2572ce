//! `kart doctor`'s look at the servers a project names: whether the remote cache
//! answers (one existence check of a blob no store holds, so nothing is read or
//! written) and whether the executor is a Remote Execution API server that runs
//! actions with SHA256 digests. Each probe has a short budget of its own, so a silent
//! server costs seconds, not the build's deadlines.

use std::time::{Duration, Instant};

use crate::store::Storage;

/// The most time one probe spends, retries included.
pub const PROBE_BUDGET: Duration = Duration::from_secs(10);

/// The name kart asks a remote about: the sha256 of a text no artifact is, so the
/// answer is "absent" from every healthy server and no bytes move.
const ABSENT: &[u8] = b"kart doctor: a blob no store holds";

/// What a look at a remote cache found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheProbe {
    /// The URL, without credentials.
    pub url: String,
    /// Milliseconds for one existence check, or why there was no answer.
    pub answer: std::result::Result<u64, String>,
}

/// Asks `storage` whether it holds a blob it cannot hold.
pub fn probe_cache(storage: &dyn Storage) -> CacheProbe {
    let digest = crate::digest::sha256_hex(ABSENT);
    let start = Instant::now();
    let answer = match storage.has_blob(&digest, Some(ABSENT.len() as u64)) {
        Ok(false) => Ok(start.elapsed().as_millis() as u64),
        Ok(true) => Err(format!(
            "says it holds blob {digest}, which no build makes: it answers yes to everything (a proxy or a misconfigured server?)"
        )),
        Err(e) => Err(e.with_causes()),
    };
    CacheProbe {
        url: storage.location(),
        answer,
    }
}

/// What a look at an executor found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExecutorProbe {
    /// The URL, without credentials.
    pub url: String,
    /// What the server offers, or why it cannot be used.
    pub answer: std::result::Result<ExecutorOffer, String>,
}

/// What an executor offers kart, as its capabilities say.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExecutorOffer {
    /// Milliseconds for the capabilities call (the connection included).
    pub ms: u64,
    /// The most bytes of blobs one batch request carries.
    pub max_batch_bytes: u64,
    /// Whether clients may write its action cache.
    pub action_cache_update: bool,
}

/// Connects to the executor at `url` (`grpc://…`, `grpcs://…`) and asks what it
/// offers: a server that does not execute, or not with SHA256 digests, is an error.
pub fn probe_executor(url: &str, token: Option<String>) -> ExecutorProbe {
    let mut settings = crate::remote::RemoteSettings::new(url);
    settings.budget = PROBE_BUDGET;
    let shown = crate::remote::strip_credentials(url);
    let start = Instant::now();
    let answer = crate::remote::grpc::GrpcClient::open(&settings, token)
        .and_then(|client| client.capabilities())
        .map_err(|e| e.with_causes())
        .and_then(|caps| {
            if caps.execution {
                Ok(ExecutorOffer {
                    ms: start.elapsed().as_millis() as u64,
                    max_batch_bytes: caps.max_batch_bytes,
                    action_cache_update: caps.action_cache_update,
                })
            } else {
                Err("the server stores blobs but does not execute actions with SHA256 digests (its capabilities offer no execution): use it as `[remote] url`, and name an execution endpoint in `[executor] url`".to_string())
            }
        });
    ExecutorProbe { url: shown, answer }
}
