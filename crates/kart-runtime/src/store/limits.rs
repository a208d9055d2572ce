//! How much the store reads: the bound on any blob, and zstd decompression that stops
//! at it (the store, the lock, action entries and bundles all check against these).

/// Upper bound for any blob (and for one whose expected size is unknown): a zstd bomb
/// or a lock naming an absurd size stops here.
pub const MAX_BLOB_BYTES: u64 = 1 << 30;

thread_local! {
    /// One zstd decompression context per thread: creating one costs more than
    /// decompressing a small cubin.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a blob into a buffer of exactly the expected size (the lock's), so a
/// frame that would expand further fails instead of filling memory. Without an
/// expected size the frame's declared size is used, capped at [`MAX_BLOB_BYTES`]. The
/// error is a description for the corruption report.
pub(crate) fn decompress_bounded(
    frame: &[u8],
    expected_size: Option<u64>,
) -> std::result::Result<Vec<u8>, String> {
    let capacity = match expected_size {
        Some(n) if n > MAX_BLOB_BYTES => {
            return Err(format!(
                "expected to be {n} bytes, more than kart reads ({MAX_BLOB_BYTES})"
            ));
        }
        Some(n) => n,
        None => match zstd::zstd_safe::get_frame_content_size(frame) {
            Ok(Some(n)) if n <= MAX_BLOB_BYTES => n,
            Ok(Some(n)) => return Err(format!("a frame claiming {n} bytes")),
            Ok(None) | Err(_) => return Err("undecodable (no zstd frame size)".into()),
        },
    };
    let mut out = Vec::with_capacity(capacity as usize);
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        let Some(decompressor) = slot.as_mut() else {
            return Err("no zstd context".to_string());
        };
        decompressor
            .decompress_to_buffer(frame, &mut out)
            .map_err(|e| format!("undecodable or larger than {capacity} bytes ({e})"))
    })?;
    Ok(out)
}
