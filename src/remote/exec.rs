//! What a build needs of a Remote Execution API (REAPI v2) server to run its compiles
//! there: blobs into content-addressed storage (asking which are missing first), an
//! `Execute` that waits for the action's result, and output blobs back. The gRPC
//! client implements it; the compile side ([`crate::pipeline::remote_exec`]) builds
//! the actions and falls back to compiling here when this fails.

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
