//! The content-addressable storage: which blobs a server lacks, and blobs read and
//! written in batches or, above the batch limit, through ByteStream, every one checked
//! against its digest.

use std::sync::atomic::{AtomicU64, Ordering};

use bazel_remote_apis::build::bazel::remote::execution::v2::content_addressable_storage_client::ContentAddressableStorageClient;
use bazel_remote_apis::google::bytestream::byte_stream_client::ByteStreamClient;
use bazel_remote_apis::google::bytestream::{ReadRequest, WriteRequest};

use super::client::GrpcClient;
use super::digest::{Capabilities, DEFAULT_MAX_BATCH_BYTES, Digest};
use super::proto;
use super::text::{message_limit, rpc_status_text, transient};
use tonic::Code;

use crate::digest::is_sha256_hex;
use crate::error::{Error, RemoteFailure, Result};
use crate::remote::check::{MAX_BLOB_BYTES, check_blob, too_large};
use crate::remote::guard::{Attempt, secs};

/// The bytes of one ByteStream write message.
const CHUNK_BYTES: usize = 1 << 20;

/// Digests asked about in one FindMissingBlobs.
const FIND_MISSING_MAX: usize = 1000;

impl GrpcClient {
    /// Which of `digests` the CAS lacks (`FindMissingBlobs`, a thousand digests a call).
    pub fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>> {
        let mut missing = Vec::new();
        for chunk in digests.chunks(FIND_MISSING_MAX) {
            let asked: std::collections::BTreeSet<&Digest> = chunk.iter().collect();
            let answer = self.run("FindMissingBlobs", self.timeouts.deadline(0), || async {
                let mut client = self.cas();
                let request = proto::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: chunk.iter().map(Digest::to_proto).collect(),
                    digest_function: 0,
                };
                match client.find_missing_blobs(self.request(request)).await {
                    Ok(r) => Attempt::Done(r.into_inner().missing_blob_digests),
                    Err(status) => self.failed("FindMissingBlobs", status),
                }
            })?;
            // Only what was asked counts: anything else in the answer is ignored.
            for d in answer {
                if let Ok(d) = Digest::from_proto(&d)
                    && asked.contains(&d)
                    && !missing.contains(&d)
                {
                    missing.push(d);
                }
            }
        }
        Ok(missing)
    }

    /// Blob `digest`, checked against it; `Ok(None)` when the CAS lacks it.
    pub fn read_blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>> {
        Ok(self
            .read_blobs(std::slice::from_ref(digest))?
            .pop()
            .flatten())
    }

    /// The blobs `digests` name, in their order, each checked against its digest
    /// (`None` for one the CAS lacks): small ones in batches (`BatchReadBlobs`), those
    /// over the batch limit through ByteStream `Read`. A blob whose bytes fail the
    /// check fails the call; nothing of it is returned.
    pub fn read_blobs(&self, digests: &[Digest]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; digests.len()];
        let mut batch: Vec<usize> = Vec::new();
        let caps = if digests.iter().any(|d| d.size > 0) {
            Some(self.capabilities()?)
        } else {
            None
        };
        for (i, d) in digests.iter().enumerate() {
            if d.size > MAX_BLOB_BYTES || !is_sha256_hex(&d.hash) {
                return Err(Error::usage(
                    format!("blob {d} is not one kart reads (a sha256 of at most 1 GiB)"),
                    None,
                ));
            }
            // The empty blob is in every CAS, stored or not.
            if d.size == 0 {
                check_blob(&self.shown, &d.hash, Some(0), &[])?;
                out[i] = Some(Vec::new());
                continue;
            }
            let Some(caps) = &caps else { continue };
            if !caps.fits_batch([d.size]) {
                out[i] = self.stream_read(d, caps)?;
                continue;
            }
            if !caps.fits_batch(batch.iter().map(|&j| digests[j].size).chain([d.size])) {
                self.batch_read(digests, &batch, caps, &mut out)?;
                batch.clear();
            }
            batch.push(i);
        }
        if let Some(caps) = &caps
            && !batch.is_empty()
        {
            self.batch_read(digests, &batch, caps, &mut out)?;
        }
        Ok(out)
    }

    /// Uploads `blobs` and returns their digests, in their order: small ones in batches
    /// (`BatchUpdateBlobs`), those over the batch limit through ByteStream `Write` in
    /// chunks. Blobs the CAS already has are sent all the same (ask
    /// [`GrpcClient::find_missing`] first to skip them).
    pub fn write_blobs(&self, blobs: &[&[u8]]) -> Result<Vec<Digest>> {
        let digests: Vec<Digest> = blobs.iter().map(|b| Digest::of(b)).collect();
        let caps = self.capabilities()?;
        let mut batch: Vec<usize> = Vec::new();
        for (i, d) in digests.iter().enumerate() {
            if let Some(max) = caps.max_blob_bytes
                && d.size > max
            {
                return Err(Error::Remote {
                    url: self.shown.clone(),
                    message: format!(
                        "blob {d} is larger than the {max} bytes the server takes (max_cas_blob_size_bytes)"
                    ),
                    failure: RemoteFailure::Refused,
                    hint: Some("raise the server's blob size limit".into()),
                });
            }
            if !caps.fits_batch([d.size]) {
                self.stream_write(d, blobs[i])?;
                continue;
            }
            if !caps.fits_batch(batch.iter().map(|&j| digests[j].size).chain([d.size])) {
                self.batch_update(&digests, blobs, &batch)?;
                batch.clear();
            }
            batch.push(i);
        }
        if !batch.is_empty() {
            self.batch_update(&digests, blobs, &batch)?;
        }
        Ok(digests)
    }

    /// Reads the blobs `digests[batch]` in one `BatchReadBlobs` into `out`, checked.
    fn batch_read(
        &self,
        digests: &[Digest],
        batch: &[usize],
        caps: &Capabilities,
        out: &mut [Option<Vec<u8>>],
    ) -> Result<()> {
        let asked: Vec<&Digest> = batch.iter().map(|&i| &digests[i]).collect();
        let bytes: u64 = asked.iter().map(|d| d.size).sum();
        let max = message_limit(caps.max_batch_bytes);
        let answer = self.run("BatchReadBlobs", self.timeouts.deadline(bytes), || async {
            let mut client = ContentAddressableStorageClient::new(self.channel.clone())
                .max_decoding_message_size(max);
            let request = proto::BatchReadBlobsRequest {
                instance_name: self.instance.clone(),
                digests: asked.iter().map(|d| d.to_proto()).collect(),
                acceptable_compressors: Vec::new(),
                digest_function: 0,
            };
            let responses = match client.batch_read_blobs(self.request(request)).await {
                Ok(r) => r.into_inner().responses,
                Err(status) => return self.failed("BatchReadBlobs", status),
            };
            let mut found: Vec<(Digest, Vec<u8>)> = Vec::new();
            for r in responses {
                let Some(Ok(d)) = r.digest.as_ref().map(Digest::from_proto) else {
                    continue;
                };
                let code = r.status.as_ref().map_or(0, |s| s.code);
                if code == Code::NotFound as i32 {
                    continue;
                }
                if code != 0 {
                    let (c, m) = r
                        .status
                        .as_ref()
                        .map_or((code, ""), |s| (s.code, s.message.as_str()));
                    let text = rpc_status_text(c, m);
                    if transient(c) {
                        return Attempt::Retry(format!("BatchReadBlobs: blob {d}: {text}"));
                    }
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!("BatchReadBlobs refused blob {d}: {text}"),
                        failure: RemoteFailure::Refused,
                        hint: None,
                    });
                }
                if r.compressor != 0 {
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!(
                            "sent blob {d} compressed ({}), which kart did not ask for",
                            r.compressor
                        ),
                        failure: RemoteFailure::Corrupt,
                        hint: Some("nothing was stored".into()),
                    });
                }
                found.push((d, r.data));
            }
            Attempt::Done(found)
        })?;
        for (d, data) in answer {
            let Some(&i) = batch.iter().find(|&&i| digests[i] == d) else {
                continue;
            };
            check_blob(&self.shown, &d.hash, Some(d.size), &data)?;
            out[i] = Some(data);
        }
        Ok(())
    }

    /// Reads one blob through ByteStream `Read`; `Ok(None)` when the CAS lacks it.
    fn stream_read(&self, d: &Digest, caps: &Capabilities) -> Result<Option<Vec<u8>>> {
        let max = message_limit(caps.max_batch_bytes);
        let resource = self.resource(&format!("blobs/{}/{}", d.hash, d.size));
        let t = self.timeouts;
        let data = self.run("ByteStream.Read", t.deadline(d.size), || async {
            let mut client =
                ByteStreamClient::new(self.channel.clone()).max_decoding_message_size(max);
            let request = ReadRequest {
                resource_name: resource.clone(),
                read_offset: 0,
                read_limit: 0,
            };
            let mut stream = match tokio::time::timeout(
                t.first_byte,
                client.read(self.request(request)),
            )
            .await
            {
                Err(_) => {
                    return Attempt::TimedOut(format!(
                        "no answer within {} s of sending the request",
                        secs(t.first_byte)
                    ));
                }
                Ok(Err(status)) if status.code() == Code::NotFound => return Attempt::Done(None),
                Ok(Err(status)) => return self.failed("ByteStream.Read", status),
                Ok(Ok(r)) => r.into_inner(),
            };
            let mut bytes: Vec<u8> = Vec::with_capacity(d.size.min(64 << 20) as usize);
            loop {
                match tokio::time::timeout(t.stall, stream.message()).await {
                    Err(_) => {
                        return Attempt::TimedOut(format!(
                            "the transfer stalled: nothing for {} s",
                            secs(t.stall)
                        ));
                    }
                    Ok(Err(status)) if status.code() == Code::NotFound && bytes.is_empty() => {
                        return Attempt::Done(None);
                    }
                    Ok(Err(status)) => return self.failed("ByteStream.Read", status),
                    Ok(Ok(None)) => return Attempt::Done(Some(bytes)),
                    Ok(Ok(Some(chunk))) => {
                        if bytes.len() as u64 + chunk.data.len() as u64 > d.size {
                            return Attempt::Fail(too_large(&self.shown, d.size));
                        }
                        bytes.extend_from_slice(&chunk.data);
                    }
                }
            }
        })?;
        if let Some(bytes) = &data {
            check_blob(&self.shown, &d.hash, Some(d.size), bytes)?;
        }
        Ok(data)
    }

    /// Uploads `blobs[batch]` in one `BatchUpdateBlobs`.
    fn batch_update(&self, digests: &[Digest], blobs: &[&[u8]], batch: &[usize]) -> Result<()> {
        let bytes: u64 = batch.iter().map(|&i| digests[i].size).sum();
        self.run(
            "BatchUpdateBlobs",
            self.timeouts.deadline(bytes),
            || async {
                let mut client = self.cas();
                let request = proto::BatchUpdateBlobsRequest {
                    instance_name: self.instance.clone(),
                    requests: batch
                        .iter()
                        .map(|&i| proto::batch_update_blobs_request::Request {
                            digest: Some(digests[i].to_proto()),
                            data: blobs[i].to_vec(),
                            compressor: 0,
                        })
                        .collect(),
                    digest_function: 0,
                };
                let responses = match client.batch_update_blobs(self.request(request)).await {
                    Ok(r) => r.into_inner().responses,
                    Err(status) => return self.failed("BatchUpdateBlobs", status),
                };
                for r in responses {
                    let Some(status) = r.status else { continue };
                    if status.code == 0 {
                        continue;
                    }
                    let which = r
                        .digest
                        .as_ref()
                        .and_then(|d| Digest::from_proto(d).ok())
                        .map_or_else(|| "a blob".to_string(), |d| format!("blob {d}"));
                    let text = rpc_status_text(status.code, &status.message);
                    if transient(status.code) {
                        return Attempt::Retry(format!("BatchUpdateBlobs: {which}: {text}"));
                    }
                    return Attempt::Fail(Error::Remote {
                        url: self.shown.clone(),
                        message: format!("BatchUpdateBlobs refused {which}: {text}"),
                        failure: RemoteFailure::Refused,
                        hint: None,
                    });
                }
                Attempt::Done(())
            },
        )
    }

    /// Uploads one blob through ByteStream `Write`, in chunks, under a fresh upload
    /// name each attempt.
    fn stream_write(&self, d: &Digest, bytes: &[u8]) -> Result<()> {
        self.run("ByteStream.Write", self.timeouts.deadline(d.size), || async {
            let resource = self.resource(&format!("uploads/{}/blobs/{}/{}", upload_id(), d.hash, d.size));
            let mut requests = Vec::with_capacity(bytes.len() / CHUNK_BYTES + 1);
            let mut offset = 0usize;
            loop {
                let end = (offset + CHUNK_BYTES).min(bytes.len());
                requests.push(WriteRequest {
                    resource_name: if offset == 0 { resource.clone() } else { String::new() },
                    write_offset: offset as i64,
                    finish_write: end == bytes.len(),
                    data: bytes[offset..end].to_vec(),
                });
                offset = end;
                if offset == bytes.len() {
                    break;
                }
            }
            let mut client = ByteStreamClient::new(self.channel.clone())
                .max_decoding_message_size(message_limit(DEFAULT_MAX_BATCH_BYTES));
            let stream = tokio_stream::iter(requests);
            match client.write(self.request(stream)).await {
                Ok(r) => {
                    let committed = r.into_inner().committed_size;
                    // A server that had the blob may answer at once, with its size.
                    if committed == d.size as i64 {
                        Attempt::Done(())
                    } else {
                        Attempt::Retry(format!(
                            "ByteStream.Write of blob {d}: the server committed {committed} bytes"
                        ))
                    }
                }
                Err(status) if status.code() == Code::AlreadyExists => Attempt::Done(()),
                Err(status) => self.failed("ByteStream.Write", status),
            }
        })
    }
}

/// A fresh upload name, a version-4 UUID (the API asks for one per upload).
fn upload_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_names_are_fresh_uuids() {
        let (a, b) = (upload_id(), upload_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }
}
