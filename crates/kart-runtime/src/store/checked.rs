//! `v1/checked`: the lock records found to agree with their key's action entry, each
//! with the state of that entry's file (inode, size, mtime, ctime) when it was read.
//! A no-op build and `build --locked` then compare a record with its entry by one
//! `stat` while the entry file is exactly as it was, instead of opening and parsing
//! one JSON file per artifact.
//!
//! It is one more file that whoever writes the store controls, so it is read as
//! untrusted: bounded in size, every line validated, and anything malformed discards
//! the whole file (the next check rebuilds it from the entries). It never vouches for
//! more than the entries did: any write of an entry renames a new file in (new inode,
//! new ctime), which no record matches, so that entry is read and compared again.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::digest::{hex, is_sha256_hex, sha256_hex};
use crate::store::fsutil::{read_bounded, write_atomic};
use crate::store::lockfile::{LockedArtifact, describe};

/// The file's name in the layout folder.
pub const CHECKED_FILE: &str = "checked";

/// The first line: bump it when a line's meaning changes (an old file is then ignored).
const HEADER: &str = "kart checked 1";

/// Bound on the file (about 400,000 records): a larger one is discarded unread.
const MAX_BYTES: u64 = 64 << 20;

/// Records kept across runs; past it, only those of the current run are written (a
/// store shared by many locks over time would otherwise only grow).
const MAX_RECORDS: usize = 300_000;

/// An entry file's state: inode, size, mtime and ctime in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryState([u64; 4]);

impl EntryState {
    /// The state of a file from its metadata.
    pub fn of(meta: &std::fs::Metadata) -> EntryState {
        let ns = |s: i64, n: i64| {
            (s as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(n as u64)
        };
        EntryState([
            meta.ino(),
            meta.size(),
            ns(meta.mtime(), meta.mtime_nsec()),
            ns(meta.ctime(), meta.ctime_nsec()),
        ])
    }
}

/// How long after its last change an entry file's state is trusted to name its bytes:
/// a file changed again within the clock's granularity could keep the same state, so a
/// fresher one is not recorded (it is read again next time).
const SETTLE_NS: u64 = 2_000_000_000;

impl EntryState {
    /// Whether the file last changed long enough ago (by its ctime) to be recorded.
    fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.0[3].saturating_add(SETTLE_NS) <= now
    }
}

/// What a lock record is bound to: its identity, key and digest, hashed into one name,
/// so that a record of another config or digest never matches.
pub fn binding(a: &LockedArtifact) -> String {
    sha256_hex(
        format!(
            "{}\n{}\n{}",
            describe(&a.kernel, &a.config, &a.target, a.kind),
            a.key,
            a.digest
        )
        .as_bytes(),
    )
}

/// The records of `v1/checked`, and those found to agree in this run.
#[derive(Debug)]
pub struct Checked {
    path: PathBuf,
    /// Binding → the entry file's state when it agreed.
    known: HashMap<Bound, EntryState>,
    /// The bindings this run found agreeing (from the file or just now).
    seen: Vec<Bound>,
    changed: bool,
}

impl Checked {
    /// Reads the file at `path`; a missing, oversized or malformed one gives no records.
    pub fn read(path: PathBuf) -> Checked {
        let known = crate::text::open_regular(&path)
            .ok()
            .and_then(|f| read_bounded(f, MAX_BYTES).ok())
            .and_then(|bytes| parse(&bytes))
            .unwrap_or_default();
        Checked {
            path,
            known,
            seen: Vec::new(),
            changed: false,
        }
    }

    /// Whether `binding` agreed with an entry file in exactly this state.
    pub fn agrees(&mut self, binding: &str, state: EntryState) -> bool {
        let Some(bound) = decode(binding) else {
            return false;
        };
        let agrees = self.known.get(&bound) == Some(&state);
        if agrees {
            self.seen.push(bound);
        }
        agrees
    }

    /// Records that `binding` agrees with the entry file in `state` (read just now),
    /// unless that file changed too recently for its state to be trusted.
    pub fn record(&mut self, binding: String, state: EntryState) {
        let Some(bound) = decode(&binding).filter(|_| state.settled()) else {
            return;
        };
        if self.known.get(&bound) != Some(&state) {
            self.known.insert(bound, state);
            self.changed = true;
        }
        self.seen.push(bound);
    }

    /// Forgets a binding whose entry disagrees or is gone.
    pub fn forget(&mut self, binding: &str) {
        if decode(binding).is_some_and(|bound| self.known.remove(&bound).is_some()) {
            self.changed = true;
        }
    }

    /// Writes the file if a record was added or forgotten; sorted, so equal sets give
    /// equal files. A failure only costs the next run its shortcut, so it is ignored.
    /// Past `MAX_RECORDS` the records start over from this run's.
    pub fn save(mut self) {
        if self.known.len() > MAX_RECORDS {
            let seen: std::collections::HashSet<&Bound> = self.seen.iter().collect();
            self.known.retain(|b, _| seen.contains(b));
            self.changed = true;
        }
        if !self.changed {
            return;
        }
        let mut lines: Vec<String> = self
            .known
            .iter()
            .map(|(b, EntryState([i, s, m, c]))| format!("{} {i} {s} {m} {c}\n", hex(b)))
            .collect();
        lines.sort_unstable();
        let mut text = format!("{HEADER}\n");
        for line in lines {
            // Beyond the bound a reader would discard the whole file.
            if (text.len() + line.len()) as u64 > MAX_BYTES {
                break;
            }
            text.push_str(&line);
        }
        let _ = write_atomic(&self.path, text.as_bytes());
    }
}

/// The records of a file's bytes, or `None` if any line is malformed.
/// A binding as its 32 bytes: the map of 100,000 records holds no strings.
type Bound = [u8; 32];

/// The bytes of a binding's 64 lower-case hex digits; `None` for anything else.
fn decode(binding: &str) -> Option<Bound> {
    if !is_sha256_hex(binding) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'a' + 10,
    };
    let mut bound = [0u8; 32];
    for (byte, pair) in bound.iter_mut().zip(binding.as_bytes().chunks_exact(2)) {
        *byte = digit(pair[0]) << 4 | digit(pair[1]);
    }
    Some(bound)
}

fn parse(bytes: &[u8]) -> Option<HashMap<Bound, EntryState>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let mut known = HashMap::new();
    for line in lines {
        let mut fields = line.split(' ');
        let binding = fields.next().and_then(decode)?;
        let mut state = [0u64; 4];
        for slot in &mut state {
            *slot = fields.next()?.parse().ok()?;
        }
        if fields.next().is_some() {
            return None;
        }
        known.insert(binding, EntryState(state));
    }
    Some(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(n: u64) -> EntryState {
        EntryState([n, 2, 3, 4])
    }

    #[test]
    fn a_file_changed_just_now_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("entry.json");
        std::fs::write(&entry, b"{}").unwrap();
        let fresh = EntryState::of(&std::fs::metadata(&entry).unwrap());
        let mut checked = Checked::read(dir.path().join(CHECKED_FILE));
        checked.record("a".repeat(64), fresh);
        assert!(!checked.agrees(&"a".repeat(64), fresh));
    }

    #[test]
    fn records_survive_a_save_and_malformed_files_give_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKED_FILE);
        let mut checked = Checked::read(path.clone());
        let b = "a".repeat(64);
        assert!(!checked.agrees(&b, state(1)));
        checked.record(b.clone(), state(1));
        checked.record("c".repeat(64), state(5));
        checked.forget(&"c".repeat(64));
        checked.save();
        let mut back = Checked::read(path.clone());
        assert!(back.agrees(&b, state(1)));
        assert!(
            !back.agrees(&b, state(2)),
            "another state of the entry file"
        );
        assert!(!back.agrees(&"c".repeat(64), state(5)));
        for bad in [
            format!("{HEADER}\n{b} 1 2 3\n"),
            format!("{HEADER}\n{b} 1 2 3 4 5\n"),
            format!("{HEADER}\n{} 1 2 3 4\n", "A".repeat(64)),
            format!("{HEADER}\n../x 1 2 3 4\n"),
            format!("kart checked 0\n{b} 1 2 3 4\n"),
            format!("{HEADER}\n{b} 1 2 3 -4\n"),
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert!(
                !Checked::read(path.clone()).agrees(&b, EntryState([1, 2, 3, 4])),
                "{bad}"
            );
        }
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(Checked::read(path).known.is_empty());
    }
}
