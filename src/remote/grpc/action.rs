//! The action cache and remote execution: results read and written by action digest,
//! and `Execute` followed through its operation's stream until the final answer.

use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2::action_cache_client::ActionCacheClient;
use bazel_remote_apis::build::bazel::remote::execution::v2::execution_client::ExecutionClient;
use bazel_remote_apis::google::longrunning::{Operation, operation};
use prost::Message;
use tonic::Code;

use super::client::GrpcClient;
use super::digest::Digest;
use super::proto;
use super::text::rpc_status_text;
use crate::error::{Error, RemoteFailure, Result};
use crate::remote::guard::Attempt;

/// The most reconnections one execution waits through (`WaitExecution` after a stream
/// that ended early), besides the guard's retries of each.
const MAX_RECONNECTIONS: u32 = 100;
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

impl GrpcClient {
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
}

/// Where an execution stands after one stream.
enum Progress {
    /// The final answer.
    Finished(Box<proto::ExecuteResponse>),
    /// The stream ended first: wait for operation `name` again (`None`: execute again).
    Interrupted { name: Option<String>, why: String },
}
