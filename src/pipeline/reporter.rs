//! How a build shows its progress: a trait the CLI implements (and the library's
//! silent reporter ignores), so the pipeline never prints.

use std::time::Duration;

use crate::pipeline::compile::CompileFailure;

/// Progress of a build, drawn by the CLI (or ignored).
pub trait BuildReporter: Sync {
    /// The plan: how many artifacts are selected, and how many must be compiled.
    fn planned(&self, _selected: usize, _to_compile: usize) {}
    /// A compile finished (successfully or not).
    fn compiled(&self, _artifact: &str, _result: std::result::Result<Duration, &CompileFailure>) {}
    /// Something worth a line: the smoke check, a replayed warning, a skipped entry.
    fn note(&self, _message: &str) {}
}

/// A reporter that shows nothing.
impl BuildReporter for crate::pool::Silent {}
