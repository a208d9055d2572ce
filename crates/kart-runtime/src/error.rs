//! The one error type of the library, with the exit code each kind maps to.
//!
//! Every variant carries what a user needs to act: the file and line of bad input, the
//! path that could not be read, the config that failed. The CLI prints the message, its
//! `source` chain and the `hint`.

use std::path::PathBuf;

/// Result with kart's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a remote request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteFailure {
    /// No answer: connection refused, timeouts, or 5xx after every retry.
    Unreachable,
    /// The server said no (4xx other than 404, a redirect).
    Refused,
    /// The server answered with bytes that fail a check (digest, size, schema).
    Corrupt,
}

/// What went wrong, grouped by who has to act.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file the user wrote (manifest, lock, tuning file) is malformed or invalid.
    #[error("{}:{line}:{column}: {message}", path.display())]
    InvalidFile {
        /// The file, relative to the working directory where possible.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: Option<String>,
    },
    /// The command line asks for something that does not exist or makes no sense.
    #[error("{message}")]
    Usage {
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: Option<String>,
    },
    /// The machine lacks something: nvcc, the right nvcc release, a CUDA driver, a GPU.
    #[error("{message}")]
    Environment {
        /// What is missing.
        message: String,
        /// How to get it.
        hint: Option<String>,
    },
    /// The remote cache failed or refused a request, or sent bytes that fail a check.
    #[error("remote {url}: {message}")]
    Remote {
        /// The URL of the request, without credentials or query.
        url: String,
        /// What happened.
        message: String,
        /// Why it failed, for callers that degrade (a build goes on locally when the
        /// remote is unreachable).
        failure: RemoteFailure,
        /// What to do about it.
        hint: Option<String>,
    },
    /// A file-system operation failed.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What kart was doing ("read", "create", "rename to", ...).
        action: &'static str,
        /// The path it was doing it to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A blob's bytes do not hash to the digest it is stored under.
    #[error("blob {digest} is corrupt: {actual} (now at {})", path.display())]
    CorruptBlob {
        /// The digest the blob is named by.
        digest: String,
        /// What is wrong: what its bytes hash to, or why they could not be read.
        actual: String,
        /// Where it was (now quarantined).
        path: PathBuf,
    },
    /// The store's internal data is unreadable (an action entry that does not parse).
    #[error("store entry `{}` is unreadable: {message}", path.display())]
    CorruptEntry {
        /// The entry file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A bundle file is not one kart wrote, or a blob in it fails its check. Nothing of
    /// it is used.
    #[error("bundle `{}`: {message}", path.display())]
    CorruptBundle {
        /// The bundle file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// One or more compile jobs failed; each was reported as it failed.
    #[error("{count} of {total} artifacts failed to build (kart.lock was left as it was; what compiled is in the store):\n{}", failed.join("\n"))]
    BuildFailed {
        /// How many artifacts failed.
        count: usize,
        /// One line per distinct error, with the artifacts it hit.
        failed: Vec<String>,
        /// How many artifacts the build had to produce.
        total: usize,
    },
    /// A check (`--locked`, `verify`) found a difference.
    #[error("{message}")]
    CheckFailed {
        /// What differs.
        message: String,
        /// What to do.
        hint: Option<String>,
    },
    /// Another kart process holds the store and did not let go in time.
    #[error("store `{}` is locked by another kart process", path.display())]
    StoreBusy {
        /// The lock file.
        path: PathBuf,
    },
    /// The CUDA driver reported an error.
    #[error("CUDA driver: {call} failed: {message}")]
    Driver {
        /// The driver call.
        call: &'static str,
        /// The driver's description of the error.
        message: String,
    },
    /// The requested artifact does not exist for this device (or cannot be loaded on it).
    #[error("{message}")]
    NotLoadable {
        /// Kernel, config, device and what exists.
        message: String,
        /// The command that would add a loadable artifact.
        hint: Option<String>,
    },
}

impl Error {
    /// The process exit code this error maps to: 1 something failed, 2 bad input or
    /// usage, 3 the environment lacks something (the README's "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::InvalidFile { .. } | Error::Usage { .. } => 2,
            Error::Environment { .. } | Error::Driver { .. } => 3,
            Error::Io { .. }
            | Error::CorruptBlob { .. }
            | Error::CorruptEntry { .. }
            | Error::CorruptBundle { .. }
            | Error::BuildFailed { .. }
            | Error::CheckFailed { .. }
            | Error::StoreBusy { .. }
            | Error::NotLoadable { .. }
            | Error::Remote { .. } => 1,
        }
    }

    /// The message with every underlying cause, on one line (for reports that carry
    /// an error as text).
    pub fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    /// A line telling the user what to do, where kart knows.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::InvalidFile { hint, .. }
            | Error::Usage { hint, .. }
            | Error::Environment { hint, .. }
            | Error::CheckFailed { hint, .. }
            | Error::NotLoadable { hint, .. }
            | Error::Remote { hint, .. } => hint.clone(),
            Error::CorruptBlob { .. } => Some(
                "the blob was moved to the store's quarantine; `kart build` compiles it again"
                    .into(),
            ),
            Error::CorruptBundle { .. } => Some(
                "make the bundle again with `kart bundle` from a verified store, and copy it whole"
                    .into(),
            ),
            Error::StoreBusy { .. } => Some(
                "wait for the other kart process (a long `kart build`?) or set --lock-timeout"
                    .into(),
            ),
            _ => None,
        }
    }

    /// The same error with another hint, where the kind carries one.
    pub fn with_hint(mut self, new: impl Into<String>) -> Self {
        match &mut self {
            Error::InvalidFile { hint, .. }
            | Error::Usage { hint, .. }
            | Error::Environment { hint, .. }
            | Error::CheckFailed { hint, .. }
            | Error::NotLoadable { hint, .. }
            | Error::Remote { hint, .. } => *hint = Some(new.into()),
            _ => {}
        }
        self
    }

    /// Shorthand for a usage error.
    pub fn usage(message: impl Into<String>, hint: Option<String>) -> Self {
        Error::Usage {
            message: message.into(),
            hint,
        }
    }

    /// Shorthand for an environment error.
    pub fn environment(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Environment {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

/// A copy for reporting the same error again (a broken kernel's error, kept while
/// commands about other kernels go on). The operating system's error is copied as its
/// kind and message.
impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::InvalidFile {
                path,
                line,
                column,
                message,
                hint,
            } => Error::InvalidFile {
                path: path.clone(),
                line: *line,
                column: *column,
                message: message.clone(),
                hint: hint.clone(),
            },
            Error::Usage { message, hint } => Error::Usage {
                message: message.clone(),
                hint: hint.clone(),
            },
            Error::Environment { message, hint } => Error::Environment {
                message: message.clone(),
                hint: hint.clone(),
            },
            Error::Remote {
                url,
                message,
                failure,
                hint,
            } => Error::Remote {
                url: url.clone(),
                message: message.clone(),
                failure: *failure,
                hint: hint.clone(),
            },
            Error::Io {
                action,
                path,
                source,
            } => Error::Io {
                action,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::CorruptBlob {
                digest,
                actual,
                path,
            } => Error::CorruptBlob {
                digest: digest.clone(),
                actual: actual.clone(),
                path: path.clone(),
            },
            Error::CorruptEntry { path, message } => Error::CorruptEntry {
                path: path.clone(),
                message: message.clone(),
            },
            Error::CorruptBundle { path, message } => Error::CorruptBundle {
                path: path.clone(),
                message: message.clone(),
            },
            Error::BuildFailed {
                count,
                failed,
                total,
            } => Error::BuildFailed {
                count: *count,
                failed: failed.clone(),
                total: *total,
            },
            Error::CheckFailed { message, hint } => Error::CheckFailed {
                message: message.clone(),
                hint: hint.clone(),
            },
            Error::StoreBusy { path } => Error::StoreBusy { path: path.clone() },
            Error::Driver { call, message } => Error::Driver {
                call,
                message: message.clone(),
            },
            Error::NotLoadable { message, hint } => Error::NotLoadable {
                message: message.clone(),
                hint: hint.clone(),
            },
        }
    }
}

/// Attach the path and the action to an I/O error.
pub trait IoContext<T> {
    /// Maps an `io::Error` to [`Error::Io`] naming `action` and `path`.
    fn at(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, action: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| Error::Io {
            action,
            path: path.into(),
            source,
        })
    }
}
