//! `v1/settled/`: what a no-op build proved, so that the next one can stop after a few
//! hundred `stat`s instead of planning every artifact and reading the whole lock.
//!
//! A whole-project build that compiled nothing, changed nothing and found every planned
//! artifact's blob in the store and its lock record in agreement with its action entry
//! writes one small file per project: a digest of everything the plan is a function of
//! (this kart binary, the loaded project, its kernels' input files, the toolchain), the
//! sha256 of `kart.lock`, and the state of the store's blob and action folders (each
//! shard folder's inode and mtime). While all three are unchanged, the plan, the lock
//! and the store are those that agreed, so `kart build` and `kart build --locked` can
//! answer without redoing the comparison.
//!
//! What this trusts: that kart's writes into the store go through a rename or an
//! unlink, which changes the shard folder's mtime (every kart write does). A file edited
//! in place keeps its folder's mtime; `kart verify` reads every blob and entry and finds
//! that, as does the runtime, which checks each blob's sha256 when it loads it. The
//! file is read as untrusted (bounded, validated, ignored when malformed), and folders
//! that changed within the clock's granularity are never recorded.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::digest::{hex, is_sha256_hex, sha256_hex};
use crate::pipeline::key::kernel_input_files;
use crate::store::fsutil::{read_bounded, write_atomic};
use crate::toolchain::Toolchain;
use crate::workspace::Workspace;

/// The first line: bump it when a field's meaning changes (an older file is ignored).
const HEADER: &str = "kart settled 1";

/// A settled file is five short lines; anything longer is not one.
const MAX_BYTES: u64 = 4096;

/// How long a folder must have stayed unchanged to be recorded: one changed again
/// within the file system clock's granularity could keep its mtime.
const SETTLE_NS: i128 = 2_000_000_000;

/// The store's folders whose shards hold one file per artifact.
const SHARDED: [&str; 2] = ["blobs", "actions"];

/// What one project's no-op build proved, as written in its settled file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    /// Digest of what the plan is a function of.
    inputs: String,
    /// sha256 of kart.lock's bytes.
    lock: String,
    /// Digest of the blob and action folders' state.
    store: String,
    /// Artifacts the plan had (all in the lock, all in the store).
    artifacts: usize,
}

impl Record {
    fn text(&self) -> String {
        format!(
            "{HEADER}\ninputs {}\nlock {}\nstore {}\nartifacts {}\n",
            self.inputs, self.lock, self.store, self.artifacts
        )
    }

    fn parse(bytes: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut field = |name: &str| -> Option<String> {
            let value = lines.next()?.strip_prefix(name)?.strip_prefix(' ')?;
            Some(value.to_string())
        };
        let inputs = field("inputs").filter(|v| is_sha256_hex(v))?;
        let lock = field("lock").filter(|v| is_sha256_hex(v))?;
        let store = field("store").filter(|v| is_sha256_hex(v))?;
        let artifacts = field("artifacts")?.parse().ok()?;
        if lines.next().is_some() {
            return None;
        }
        Some(Record {
            inputs,
            lock,
            store,
            artifacts,
        })
    }
}

/// The settled state of one project's build, computed for this run: compared with the
/// file before planning, and written after a slow no-op build found everything in
/// agreement.
pub(super) struct Probe {
    path: PathBuf,
    inputs: String,
}

impl Probe {
    /// The probe of a whole-project build, or `None` where the shortcut cannot apply
    /// (kernels that could not be read, a read-only store, inputs that cannot be read:
    /// the slow path reports those).
    pub(super) fn new(ws: &Workspace, toolchain: &Toolchain) -> Option<Probe> {
        if !ws.project.broken.is_empty() || ws.store.is_read_only() {
            return None;
        }
        let inputs = plan_inputs(ws, toolchain)?;
        let project = sha256_hex(ws.project.root.as_os_str().as_encoded_bytes());
        Some(Probe {
            path: ws.store.settled_dir().join(project),
            inputs,
        })
    }

    /// The number of artifacts, when the recorded state is exactly this run's: same
    /// plan inputs, same lock bytes, same store folders.
    pub(super) fn matches(&self, lock: &Path) -> Option<usize> {
        let file = crate::text::open_regular(&self.path).ok()?;
        let record = Record::parse(&read_bounded(file, MAX_BYTES).ok()?)?;
        if record.inputs != self.inputs {
            return None;
        }
        let (store, _) = store_state(&self.path)?;
        if record.store != store || record.lock != file_sha256(lock)? {
            return None;
        }
        Some(record.artifacts)
    }

    /// Records that the plan of `artifacts` artifacts, the lock at `lock` and the store
    /// agree, unless a store folder changed too recently to be trusted. A failure to
    /// write only costs the next build its shortcut, so it is ignored.
    pub(super) fn record(&self, lock: &Path, artifacts: usize) {
        let Some((store, newest)) = store_state(&self.path) else {
            return;
        };
        if newest.saturating_add(SETTLE_NS) > now_ns() {
            return;
        }
        let Some(lock) = file_sha256(lock) else {
            return;
        };
        let record = Record {
            inputs: self.inputs.clone(),
            lock,
            store,
            artifacts,
        };
        let _ = write_atomic(&self.path, record.text().as_bytes());
    }

    /// Removes the record: what it vouched for is no longer true.
    pub(super) fn forget(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Everything the plan and the lock's records are a function of: this kart binary (by
/// path, size, inode and mtime: another build of kart plans anew), the loaded project
/// (kart.toml and every kernel.toml, as parsed), each kernel's input files by content,
/// and the toolchain's fingerprint. `None` if any of it cannot be read.
fn plan_inputs(ws: &Workspace, toolchain: &Toolchain) -> Option<String> {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(HEADER.as_bytes());
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    field(exe.as_os_str().as_encoded_bytes());
    field(&meta.size().to_le_bytes());
    field(&meta.ino().to_le_bytes());
    field(&meta.mtime().to_le_bytes());
    field(&meta.mtime_nsec().to_le_bytes());
    // Debug output covers every field the plan reads, and a field added later too.
    field(format!("{:?}", ws.project).as_bytes());
    field(format!("{toolchain:?}").as_bytes());
    for kernel in &ws.project.kernels {
        let files = kernel_input_files(&ws.project.root, kernel).ok()?;
        field(kernel.name.as_bytes());
        for (path, hash) in &files {
            field(path.as_bytes());
            field(hash.as_bytes());
        }
    }
    Some(hex(&h.finalize()))
}

/// The state of the store's sharded folders: a digest of every shard folder's name,
/// inode and mtime (and of the two parents'), and the newest mtime among them in
/// nanoseconds. `settled` is `<store>/v1/settled/<project>`.
fn store_state(settled: &Path) -> Option<(String, i128)> {
    let layout = settled.parent()?.parent()?;
    let mut h = Sha256::new();
    let mut newest = i128::MIN;
    let mut note = |name: &str, meta: &std::fs::Metadata| {
        let mtime = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        newest = newest.max(mtime);
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(meta.ino().to_le_bytes());
        h.update(mtime.to_le_bytes());
    };
    for sub in SHARDED {
        let dir = layout.join(sub);
        note(sub, &std::fs::symlink_metadata(&dir).ok()?);
        let mut shards: Vec<(String, std::fs::Metadata)> = Vec::new();
        for entry in std::fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            shards.push((name, entry.metadata().ok()?));
        }
        shards.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, meta) in &shards {
            note(&format!("{sub}/{name}"), meta);
        }
    }
    Some((hex(&h.finalize()), newest))
}

/// sha256 of a file's bytes, read in pieces (a lock of 100,000 artifacts is ~50 MB).
fn file_sha256(path: &Path) -> Option<String> {
    let mut file = crate::text::open_regular(path).ok()?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(hex(&h.finalize()))
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            inputs: "a".repeat(64),
            lock: "b".repeat(64),
            store: "c".repeat(64),
            artifacts: 6000,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = record();
        assert_eq!(Record::parse(r.text().as_bytes()), Some(r));
    }

    #[test]
    fn anything_but_a_whole_record_is_no_record() {
        let text = record().text();
        for bad in [
            text.replace(HEADER, "kart settled 0"),
            text.replace("inputs", "input"),
            text.replace(&"b".repeat(64), "not a digest"),
            text.replace("6000", "-1"),
            format!("{text}extra\n"),
            text.lines().take(3).collect::<Vec<_>>().join("\n"),
            String::new(),
        ] {
            assert_eq!(Record::parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(Record::parse(&[0xff, 0xfe]), None);
    }
}
