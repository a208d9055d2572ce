//! How the client says what a server answered: status codes and messages bounded and
//! escaped (a server chooses its messages), and the decoding limit of answers.

use tonic::Code;

use super::digest::DEFAULT_MAX_BATCH_BYTES;

/// The decoding limit of messages that may carry a batch of `batch` bytes.
pub(super) fn message_limit(batch: u64) -> usize {
    usize::try_from(batch.max(DEFAULT_MAX_BATCH_BYTES) + (1 << 20)).unwrap_or(usize::MAX)
}

/// Whether a status code of one blob in a batch is worth another try.
pub(super) fn transient(code: i32) -> bool {
    [Code::Unavailable, Code::ResourceExhausted, Code::Aborted]
        .iter()
        .any(|c| *c as i32 == code)
}

/// A status as people read it, with the causes of a local failure, bounded and with
/// control characters escaped (a server chooses its message).
pub(super) fn status_text(status: &tonic::Status) -> String {
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
pub(super) fn rpc_status_text(code: i32, message: &str) -> String {
    let name = format!("{:?}", Code::from_i32(code));
    let message = bounded_text(message);
    if message.is_empty() {
        name
    } else {
        format!("{name}: {message}")
    }
}

pub(super) fn bounded_text(text: &str) -> String {
    let mut out: String = text.chars().take(400).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    crate::untrusted::for_terminal(&out).into_owned()
}
