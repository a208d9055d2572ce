//! What a build needs of a Remote Execution API (REAPI v2) server to run its compiles
//! there: blobs into content-addressed storage (asking which are missing first), an
//! `Execute` that waits for the action's result, and output blobs back. The gRPC
//! client implements it; the compile side ([`crate::pipeline::remote_exec`]) builds
//! the actions and falls back to compiling here when this fails.

use std::sync::Arc;
use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;

use crate::remote::merkle::Digest;

/// Why an action has no result from the executor. Every kind makes the compile run
/// here instead; [`ExecFailure::Unreachable`] also stops sending the build's other
/// compiles to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFailure {
    /// The server cannot be reached, stopped answering, or the wait passed its
    /// deadline.
    Unreachable(String),
    /// The server answered, but the action did not run to a result (a worker was
    /// lost, the scheduler gave up, an output is missing).
    Failed(String),
}

impl std::fmt::Display for ExecFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecFailure::Unreachable(why) | ExecFailure::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// A REAPI server that runs actions.
pub trait Executor: Send + Sync {
    /// The server's URL, for messages.
    fn url(&self) -> String;

    /// Which of `digests` the server's storage lacks.
    fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>, ExecFailure>;

    /// Uploads blobs (each checked by the caller to match its digest).
    fn upload(&self, blobs: Vec<(Digest, Vec<u8>)>) -> Result<(), ExecFailure>;

    /// Executes the action (its `Action`, `Command` and input root uploaded), the
    /// server's action cache consulted first, and waits at most `deadline` for the
    /// result. A result with a non-zero exit code is a result (the compile failed);
    /// `Err` when there is none.
    fn execute(&self, action: &Digest, deadline: Duration)
    -> Result<re::ActionResult, ExecFailure>;

    /// Downloads one blob, checked against its digest.
    fn download(&self, digest: &Digest) -> Result<Vec<u8>, ExecFailure>;
}

/// Opens the executor at `url` (`grpc://host:port/instance` or `grpcs://…`), with
/// `jobs` parallel calls and `token` (if any) as a bearer token. No connection is made
/// before the first compile.
pub fn open(
    url: &str,
    jobs: usize,
    token: Option<String>,
) -> crate::error::Result<Arc<dyn Executor>> {
    let mut settings = crate::remote::RemoteSettings::new(url);
    settings.jobs = jobs.max(1);
    // A build may run for hours on a cluster: each wait has its own deadline (the
    // executor's timeout), and the first timeout gives the server up for the run.
    settings.budget = Duration::from_secs(7 * 24 * 3600);
    let client = crate::remote::grpc::GrpcClient::open(&settings, token)?;
    Ok(Arc::new(client))
}

/// An error of the client as the executor's failure: a server that cannot be reached
/// or stopped answering gives the executor up for the build.
fn failure(e: crate::error::Error) -> ExecFailure {
    match &e {
        crate::error::Error::Remote {
            failure: crate::error::RemoteFailure::Unreachable,
            ..
        } => ExecFailure::Unreachable(e.with_causes()),
        _ => ExecFailure::Failed(e.with_causes()),
    }
}

impl Executor for crate::remote::grpc::GrpcClient {
    fn url(&self) -> String {
        crate::remote::grpc::GrpcClient::url(self).to_string()
    }

    fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>, ExecFailure> {
        crate::remote::grpc::GrpcClient::find_missing(self, digests).map_err(failure)
    }

    fn upload(&self, blobs: Vec<(Digest, Vec<u8>)>) -> Result<(), ExecFailure> {
        let bytes: Vec<&[u8]> = blobs.iter().map(|(_, b)| b.as_slice()).collect();
        self.write_blobs(&bytes).map(|_| ()).map_err(failure)
    }

    fn execute(
        &self,
        action: &Digest,
        deadline: Duration,
    ) -> Result<re::ActionResult, ExecFailure> {
        let options = crate::remote::grpc::ExecuteOptions {
            skip_cache_lookup: false,
            timeout: deadline,
        };
        let response =
            crate::remote::grpc::GrpcClient::execute(self, action, &options).map_err(failure)?;
        if let Some(status) = response.status.as_ref().filter(|s| s.code != 0) {
            return Err(ExecFailure::Failed(format!(
                "action {action} did not run to a result (status {}: {})",
                status.code,
                crate::untrusted::for_terminal(&status.message)
            )));
        }
        response.result.ok_or_else(|| {
            ExecFailure::Failed(format!("action {action}: the answer holds no result"))
        })
    }

    fn download(&self, digest: &Digest) -> Result<Vec<u8>, ExecFailure> {
        self.read_blob(digest).map_err(failure)?.ok_or_else(|| {
            ExecFailure::Failed(format!("blob {digest} is not in the server's storage"))
        })
    }
}
