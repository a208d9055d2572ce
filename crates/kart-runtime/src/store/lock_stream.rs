//! The records of kart.lock one at a time, each checked as [`Lockfile::parse`] checks
//! it, without holding them: for a command that only passes over the lock (`kart ls`)
//! at 100,000 artifacts, where owned records are most of its time and memory.
//!
//! A large lock is read in pieces on several threads, each piece starting at a
//! record's header; the order of records is checked within each piece and across the
//! joins. Anything this reader does not accept (text not in kart's layout, or anything
//! [`Lockfile::parse`] refuses) makes it answer `None` before its caller has shown
//! anything: the caller then reads the lock the general way, which gives the answer,
//! and every error message with its file and line.

use std::path::Path;

use crate::cubin::check_entry;
use crate::store::lock_lines::{RecordRef, scan};
use crate::store::lockfile::{
    LOCK_FILE, LOCK_VERSION, Lockfile, OLDEST_LOCK_VERSION, check_artifact, tables_start,
};

/// Below this many bytes of records, one thread reads them all.
const PIECE_BYTES: usize = 4 << 20;

/// What one piece's reading leaves: the caller's state, and its first and last records
/// (for the order across pieces).
struct Piece<'a, S> {
    state: S,
    first: Option<RecordRef<'a>>,
    last: Option<RecordRef<'a>>,
}

/// Reads every artifact record of lock text `text`, in order, checked as
/// [`Lockfile::parse`] checks it, and calls `each` with a state and the record. The
/// text is read in up to `threads` pieces at once, each with its own state from
/// `start`; the states come back in the lock's order. `None` where the text is not in
/// the layout kart writes, or where [`Lockfile::parse`] would refuse it; `each` has
/// then seen some records and must discard what it made of them.
pub fn read_checked<'a, S: Send>(
    text: &'a str,
    threads: usize,
    start: impl Fn() -> S + Sync,
    each: impl Fn(&mut S, &RecordRef<'a>) + Sync,
) -> Option<Vec<S>> {
    let (head, tail) = text.split_at(tables_start(text).unwrap_or(text.len()));
    let first = if head.starts_with("[[artifact]]") {
        0
    } else {
        memchr::memmem::find(head.as_bytes(), b"\n[[artifact]]").map_or(head.len(), |at| at + 1)
    };
    let (preamble, records) = head.split_at(first);
    // The version line, and nothing else but comments, before the first record.
    let version = scan(preamble, |_| None)??;
    if !(OLDEST_LOCK_VERSION..=LOCK_VERSION).contains(&version) {
        return None;
    }
    if !tables_are_valid(version, tail) {
        return None;
    }
    let pieces = split(records, threads);
    let read = |piece: &'a str| read_piece(piece, version, start(), &each);
    let read: Vec<Option<Piece<'a, S>>> = std::thread::scope(|s| {
        let later: Vec<_> = pieces[1..]
            .iter()
            .map(|&piece| s.spawn(move || read(piece)))
            .collect();
        let mut all = vec![read(pieces[0])];
        // A piece's thread only reads text and calls `each`: a panic there is a bug,
        // raised again here.
        all.extend(
            later
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
        );
        all
    });
    let read: Vec<Piece<'a, S>> = read.into_iter().collect::<Option<_>>()?;
    // Each piece's first record after the last record before it.
    let mut last: Option<&RecordRef<'a>> = None;
    for piece in &read {
        if let (Some(before), Some(first)) = (last, &piece.first)
            && before.id() >= first.id()
        {
            return None;
        }
        last = piece.last.as_ref().or(last);
    }
    Some(read.into_iter().map(|p| p.state).collect())
}

/// `records` cut into about `threads` pieces of at least [`PIECE_BYTES`], each but the
/// first starting at a `[[artifact]]` line.
fn split(records: &str, threads: usize) -> Vec<&str> {
    let count = threads.clamp(1, (records.len() / PIECE_BYTES).max(1));
    let mut pieces = Vec::with_capacity(count);
    let mut from = 0;
    for i in 1..count {
        let near = records.len() * i / count;
        let Some(at) = records
            .get(near.max(from)..)
            .and_then(|rest| memchr::memmem::find(rest.as_bytes(), b"\n[[artifact]]"))
        else {
            break;
        };
        let at = near.max(from) + at + 1;
        pieces.push(&records[from..at]);
        from = at;
    }
    pieces.push(&records[from..]);
    pieces
}

/// Reads one piece: each record checked, in order after the one before it.
fn read_piece<'a, S>(
    piece: &'a str,
    version: u32,
    mut state: S,
    each: &impl Fn(&mut S, &RecordRef<'a>),
) -> Option<Piece<'a, S>> {
    let mut first: Option<RecordRef<'a>> = None;
    // The record before (its buffers become the next record's).
    let mut before = RecordRef::default();
    let mut any = false;
    scan(piece, |record| {
        if !checked(record, version) || (any && before.id() >= record.id()) {
            return None;
        }
        each(&mut state, record);
        if first.is_none() {
            first = Some(record.clone());
        }
        std::mem::swap(&mut before, record);
        any = true;
        Some(())
    })?;
    Some(Piece {
        state,
        first,
        last: any.then_some(before),
    })
}

/// Whether [`Lockfile::parse`] takes this record as it is: the checks of
/// [`LockedArtifact::validate`], derived params only from version 2, and its config and
/// derived params in the order kart writes them (which the comparison of records
/// needs; another order is left to the general path).
///
/// [`LockedArtifact::validate`]: crate::store::lockfile::LockedArtifact::validate
fn checked(r: &RecordRef<'_>, version: u32) -> bool {
    let entries = r.entries().iter().map(|e| {
        check_entry(
            e.name,
            e.symbol,
            e.template,
            e.instance,
            (e.params_len, e.params_max),
        )
    });
    r.sorted()
        && (r.derived().is_empty() || version >= 2)
        && check_artifact(
            [r.kernel, r.key, r.digest, r.target, r.nvcc],
            r.size,
            entries,
            r.derived().iter().map(|(name, _)| *name),
        )
        .is_ok()
}

/// Whether the tables after the records (`[[kernel]]`, `[[pruned]]`) are what
/// [`Lockfile::parse`] takes, with no artifact among them: they are parsed and checked
/// by it, after the version line.
fn tables_are_valid(version: u32, tail: &str) -> bool {
    if tail.is_empty() {
        return true;
    }
    // `[artifact…]` headers (`[[artifact]]` too) would add to the records.
    if memchr::memmem::find(tail.as_bytes(), b"[artifact").is_some() {
        return false;
    }
    Lockfile::parse(
        &format!("version = {version}\n{tail}"),
        Path::new(LOCK_FILE),
    )
    .is_ok_and(|lock| lock.artifacts.is_empty())
}
