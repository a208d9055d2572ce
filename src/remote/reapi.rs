//! A Remote Execution API server (REAPI v2: bazel-remote, BuildBuddy, Buildbarn,
//! NativeLink, EngFlow, BuildGrid) as kart's cache, unchanged: blobs in its CAS,
//! action entries in its action cache as real `ActionResult`s.
//!
//! For kart's action key K the action is deterministic: a `Command` with arguments
//! `kart artifact K` and output paths `artifact` and `entry.json`, and an `Action` with
//! that command's digest and the empty input root. Both go to the CAS beside the entry
//! (so any tool can show what an action-cache record is), and the action's digest is
//! the record's key. Its `ActionResult` lists two output files: `artifact`, the blob
//! (its sha256 and size), and `entry.json`, kart's action entry as a CAS blob. Reading
//! one back checks everything: the entry's bytes against their digest, the entry
//! itself (`parse_entry`, which also checks its key), and the `artifact` output against
//! the entry's digest and size; a record that disagrees is refused, never taken.
//!
//! The CAS names a blob by sha256 and size together. Every caller that reads blobs
//! from a remote knows the size (the lock and action entries carry it); a question
//! without one (`has_blob` or `get_blob` with `size: None`) has no name to ask by and
//! is answered as a miss, which costs a download or a compile, never a wrong byte.

use super::RemoteSettings;
use super::check::{MAX_ENTRY_BYTES, check_blob, checked_name, encode_entry, parse_entry};
use super::grpc::{Digest, GrpcClient, proto};
use crate::error::{Error, RemoteFailure, Result};
use crate::store::{ActionEntry, Storage, misnamed_blob};

/// The output path of the artifact in kart's action results.
pub const ARTIFACT_OUTPUT: &str = "artifact";

/// The output path of the action entry (JSON) in kart's action results.
pub const ENTRY_OUTPUT: &str = "entry.json";

/// The `Action` (encoded) and its `Command` (encoded) that stand for kart's key `key`
/// in the action cache, with their digests. The action's digest is the record's key.
pub fn action_of(key: &str) -> ((Digest, Vec<u8>), (Digest, Vec<u8>)) {
    let command = proto::Command {
        arguments: vec!["kart".into(), "artifact".into(), key.to_string()],
        // Sorted, as the API asks.
        output_paths: vec![ARTIFACT_OUTPUT.into(), ENTRY_OUTPUT.into()],
        ..Default::default()
    };
    let (command_digest, command_bytes) = Digest::of_message(&command);
    let action = proto::Action {
        command_digest: Some(command_digest.to_proto()),
        // The empty Directory encodes to no bytes.
        input_root_digest: Some(Digest::of(&[]).to_proto()),
        ..Default::default()
    };
    (Digest::of_message(&action), (command_digest, command_bytes))
}

/// A REAPI server as a [`Storage`].
pub(super) struct ReapiStorage {
    client: GrpcClient,
}

impl ReapiStorage {
    /// Opens the server `settings.url` names (no request is made).
    pub(super) fn open(settings: &RemoteSettings, token: Option<String>) -> Result<ReapiStorage> {
        Ok(ReapiStorage {
            client: GrpcClient::open(settings, token)?,
        })
    }

    fn corrupt(&self, key: &str, message: String) -> Error {
        Error::Remote {
            url: self.client.url().to_string(),
            message: format!("the action result of key {key}: {message}"),
            failure: RemoteFailure::Corrupt,
            hint: Some(
                "ignored; the artifact is compiled locally (remove the record from the server's action cache to replace it)"
                    .into(),
            ),
        }
    }
}

/// The digest of output `path` in `result`, if it lists one.
fn output<'a>(result: &'a proto::ActionResult, path: &str) -> Option<&'a proto::OutputFile> {
    result.output_files.iter().find(|f| f.path == path)
}

impl Storage for ReapiStorage {
    fn location(&self) -> String {
        self.client.url().to_string()
    }

    fn has_blob(&self, digest: &str, size: Option<u64>) -> Result<bool> {
        let Some(size) = size else {
            return Ok(false);
        };
        let d = Digest {
            hash: checked_name(digest)?.to_string(),
            size,
        };
        Ok(self
            .client
            .find_missing(std::slice::from_ref(&d))?
            .is_empty())
    }

    fn missing_blobs(&self, blobs: &[(&str, u64)]) -> Result<Vec<String>> {
        let digests = blobs
            .iter()
            .map(|&(d, size)| {
                Ok(Digest {
                    hash: checked_name(d)?.to_string(),
                    size,
                })
            })
            .collect::<Result<Vec<Digest>>>()?;
        let missing = self.client.find_missing(&digests)?;
        Ok(digests
            .into_iter()
            .filter(|d| missing.contains(d))
            .map(|d| d.hash)
            .collect())
    }

    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        let Some(size) = size else {
            return Ok(None);
        };
        let d = Digest {
            hash: checked_name(digest)?.to_string(),
            size,
        };
        self.client.read_blob(&d)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let d = Digest::of(bytes);
        if d.hash != checked_name(digest)? {
            return Err(misnamed_blob(self.client.url(), digest, &d.hash));
        }
        self.client.write_blobs(&[bytes]).map(|_| ())
    }

    fn has_entry(&self, key: &str) -> Result<bool> {
        let ((action, _), _) = action_of(checked_name(key)?);
        Ok(self.client.get_action_result(&action, &[])?.is_some())
    }

    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        let ((action, _), _) = action_of(checked_name(key)?);
        let Some(result) = self.client.get_action_result(&action, &[ENTRY_OUTPUT])? else {
            return Ok(None);
        };
        if result.exit_code != 0 {
            return Err(self.corrupt(key, format!("exit code {}", result.exit_code)));
        }
        let named = |path: &str| -> Result<(Digest, Vec<u8>)> {
            let file = output(&result, path).ok_or_else(|| {
                self.corrupt(
                    key,
                    format!("no output file `{path}` (not written by kart)"),
                )
            })?;
            let digest = file
                .digest
                .as_ref()
                .ok_or_else(|| self.corrupt(key, format!("output `{path}` has no digest")))
                .and_then(|d| Digest::from_proto(d).map_err(|why| self.corrupt(key, why)))?;
            Ok((digest, file.contents.clone()))
        };
        let (entry_digest, inlined) = named(ENTRY_OUTPUT)?;
        if entry_digest.size > MAX_ENTRY_BYTES {
            return Err(self.corrupt(
                key,
                format!(
                    "its entry has {} bytes, more than the {} an entry may have",
                    entry_digest.size, MAX_ENTRY_BYTES
                ),
            ));
        }
        // The server may send the entry inline; checked like a download.
        let bytes = if !inlined.is_empty() || entry_digest.size == 0 {
            check_blob(
                self.client.url(),
                &entry_digest.hash,
                Some(entry_digest.size),
                &inlined,
            )?;
            inlined
        } else {
            match self.client.read_blob(&entry_digest)? {
                Some(bytes) => bytes,
                // The CAS dropped the entry's blob: a miss.
                None => return Ok(None),
            }
        };
        let url = self.client.url().to_string();
        let Some(entry) = parse_entry(&url, key, &bytes)? else {
            return Ok(None);
        };
        let (artifact, _) = named(ARTIFACT_OUTPUT)?;
        if artifact.hash != entry.digest || artifact.size != entry.size {
            return Err(self.corrupt(
                key,
                format!(
                    "its output `{ARTIFACT_OUTPUT}` is blob {artifact}, but its entry names {}/{}",
                    entry.digest, entry.size
                ),
            ));
        }
        Ok(Some(entry))
    }

    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        let key = checked_name(&entry.key)?;
        let capabilities = self.client.capabilities()?;
        if !capabilities.action_cache_update {
            return Err(Error::Remote {
                url: self.client.url().to_string(),
                message: "the server does not let clients write its action cache".into(),
                failure: RemoteFailure::Refused,
                hint: Some(
                    "allow action cache updates on the server (or its instance), or mark the remote read_only"
                        .into(),
                ),
            });
        }
        let ((action, action_bytes), (command, command_bytes)) = action_of(key);
        // Never replace a record: the first one written stands.
        if self.client.get_action_result(&action, &[])?.is_some() {
            return Ok(());
        }
        let json = encode_entry(self.client.url(), entry)?;
        let json_digest = Digest::of(&json);
        let artifact = Digest {
            hash: checked_name(&entry.digest)?.to_string(),
            size: entry.size,
        };
        let missing = self.client.find_missing(&[
            artifact.clone(),
            json_digest.clone(),
            command.clone(),
            action.clone(),
        ])?;
        if missing.contains(&artifact) {
            return Err(Error::Remote {
                url: self.client.url().to_string(),
                message: format!(
                    "the action entry of key {key} was not written: its blob {artifact} is not in the server's CAS"
                ),
                failure: RemoteFailure::Refused,
                hint: Some("push the blob first (`kart push` does, entries after blobs)".into()),
            });
        }
        let upload: Vec<&[u8]> = [
            (&json_digest, json.as_slice()),
            (&command, command_bytes.as_slice()),
            (&action, action_bytes.as_slice()),
        ]
        .into_iter()
        .filter(|(d, _)| missing.contains(d))
        .map(|(_, b)| b)
        .collect();
        if !upload.is_empty() {
            self.client.write_blobs(&upload)?;
        }
        let file = |path: &str, d: &Digest| proto::OutputFile {
            path: path.into(),
            digest: Some(d.to_proto()),
            ..Default::default()
        };
        let result = proto::ActionResult {
            output_files: vec![
                file(ARTIFACT_OUTPUT, &artifact),
                file(ENTRY_OUTPUT, &json_digest),
            ],
            exit_code: 0,
            ..Default::default()
        };
        self.client.update_action_result(&action, &result)?;
        Ok(())
    }
}
