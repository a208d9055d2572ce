//! Reading an object store's answers under the remote's clocks (the first byte, then
//! progress), and what an error of object_store means for one attempt.

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::error::Error;
use crate::remote::check::too_large;
use crate::remote::guard::{Attempt, secs};
use crate::remote::settings::{MIN_PROGRESS_BYTES, Timeouts};

/// What an object_store error means for one attempt.
pub(super) enum Class {
    Missing,
    Exists,
    Retry(String),
    TimedOut(String),
    Fail(Error),
}

impl Class {
    /// As the guard takes it (`Missing` and `Exists` are each call's to handle).
    pub(super) fn into_attempt<T>(self) -> Attempt<T> {
        match self {
            Class::Retry(why) => Attempt::Retry(why),
            Class::TimedOut(why) => Attempt::TimedOut(why),
            Class::Fail(e) => Attempt::Fail(e),
            Class::Missing => Attempt::Retry("the object vanished while it was read".into()),
            Class::Exists => Attempt::Retry("the server answered that the object exists".into()),
        }
    }
}

/// Waits for a request's answer no longer than the first-byte clock (one stall period
/// more per MiB uploaded); `Err` says why it stopped waiting.
pub(super) async fn first_byte<T>(
    t: Timeouts,
    upload: u64,
    request: impl std::future::Future<Output = T>,
) -> std::result::Result<T, String> {
    let wait = t.first_byte + t.stall.saturating_mul((upload >> 20) as u32);
    tokio::time::timeout(wait, request)
        .await
        .map_err(|_| format!("no answer within {} s of sending the request", secs(wait)))
}

/// Why a body was not read to its end.
pub(super) enum Stop {
    /// Final (too large).
    Fail(Error),
    /// Moved too little for too long.
    Stalled(String),
    /// The stream failed.
    Broken(object_store::Error),
}

/// Reads a body of at most `limit` bytes (`announced` is room made at the start); a
/// body that moves less than [`MIN_PROGRESS_BYTES`] in `stall` is stalled.
pub(super) async fn read_stream<B: AsRef<[u8]>>(
    mut stream: impl futures_util::Stream<Item = object_store::Result<B>> + Unpin,
    announced: u64,
    limit: u64,
    stall: Duration,
    shown: &str,
) -> std::result::Result<Vec<u8>, Stop> {
    let mut bytes = Vec::with_capacity(announced.min(limit) as usize);
    let mut window_start = Instant::now();
    let mut window_bytes = 0usize;
    loop {
        let left = stall.saturating_sub(window_start.elapsed());
        let chunk = match tokio::time::timeout(left, stream.next()).await {
            Err(_) if window_bytes == 0 => {
                return Err(Stop::Stalled(format!(
                    "the transfer stalled: nothing for {} s",
                    secs(stall)
                )));
            }
            Err(_) => None,
            Ok(None) => return Ok(bytes),
            Ok(Some(Err(e))) => return Err(Stop::Broken(e)),
            Ok(Some(Ok(chunk))) => Some(chunk),
        };
        if let Some(chunk) = chunk {
            let chunk = chunk.as_ref();
            window_bytes += chunk.len();
            bytes.extend_from_slice(chunk);
            if bytes.len() as u64 > limit {
                return Err(Stop::Fail(too_large(shown, limit)));
            }
        }
        if window_start.elapsed() >= stall {
            if window_bytes < MIN_PROGRESS_BYTES {
                return Err(Stop::Stalled(format!(
                    "the transfer stalled: {window_bytes} bytes in {} s",
                    secs(stall)
                )));
            }
            window_start = Instant::now();
            window_bytes = 0;
        }
    }
}

/// The HTTP error (connection, timeout, a body cut short) under an object_store error.
pub(super) fn http_error(e: &object_store::Error) -> Option<&object_store::client::HttpError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<object_store::client::HttpError>() {
            return Some(http);
        }
        source = s.source();
    }
    None
}

/// An HTTP error with its causes ("connection refused"), without any URL.
pub(super) fn describe_http(e: &object_store::client::HttpError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    redact(&text)
}

/// The status code an object_store error message names (`… status code: 503 …`).
pub(super) fn status_of(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// `text` with every URL's query cut off (a signed or SAS URL carries credentials
/// there) and bounded, for a message.
pub(super) fn redact(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match (word.contains("://"), word.find('?')) {
            (true, Some(q)) => out.push(format!("{}?…", &word[..q])),
            _ => out.push(word.to_string()),
        }
    }
    let text = out.join(" ");
    match text.char_indices().nth(400) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
