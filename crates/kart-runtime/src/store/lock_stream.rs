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
    read_in_pieces(text, threads, PIECE_BYTES, start, each)
}

/// [`read_checked`] with pieces of at least `piece_bytes`.
fn read_in_pieces<'a, S: Send>(
    text: &'a str,
    threads: usize,
    piece_bytes: usize,
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
    let pieces = split(records, threads, piece_bytes);
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

/// `records` cut into about `threads` pieces of at least `piece_bytes`, each but the
/// first starting at a `[[artifact]]` line.
fn split(records: &str, threads: usize, piece_bytes: usize) -> Vec<&str> {
    let count = threads.clamp(1, (records.len() / piece_bytes.max(1)).max(1));
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::store::lock_records::Fields;
    use crate::store::lockfile::{LockedArtifact, Lockfile};
    use crate::store::testlock::generated;

    /// The records read in pieces of at least `piece_bytes` on `threads` threads, owned.
    fn stream(text: &str, threads: usize, piece_bytes: usize) -> Option<Vec<LockedArtifact>> {
        let pieces = super::read_in_pieces(text, threads, piece_bytes, Vec::new, |v, r| {
            v.push(LockedArtifact::from(Fields::of(r, &mut Default::default())))
        })?;
        Some(pieces.into_iter().flatten().collect())
    }

    fn parse(text: &str) -> Option<Vec<LockedArtifact>> {
        Lockfile::parse(text, Path::new("kart.lock"))
            .ok()
            .map(|l| l.artifacts)
    }

    #[test]
    fn records_read_in_pieces_are_the_whole_parse_s() {
        for seed in 0..12 {
            let text = generated(seed).to_text();
            let whole = parse(&text).expect("a generated lock parses");
            assert!(whole.len() > 20, "{seed}");
            for (threads, piece_bytes) in [(1, 1 << 20), (2, 1), (3, 1), (7, 500), (64, 1)] {
                assert_eq!(
                    stream(&text, threads, piece_bytes).as_ref(),
                    Some(&whole),
                    "seed {seed}, {threads} threads"
                );
            }
            // The pieces start at record headers, whatever the cut.
            let records = &text[text.find("[[artifact]]").unwrap()..];
            let pieces = super::split(records, 5, 1);
            assert_eq!(pieces.len(), 5);
            assert_eq!(pieces.concat(), records);
            assert!(pieces.iter().all(|p| p.starts_with("[[artifact]]")));
        }
        // A lock of no record says `artifact = []`: left to the general path.
        let empty = Lockfile::new(Vec::new()).to_text();
        assert!(empty.contains("artifact = []"), "{empty}");
        assert_eq!(stream(&empty, 2, 1), None);
        // The repository's lock, with its `[[kernel]]` tables.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kart.lock");
        let text = std::fs::read_to_string(repo).unwrap();
        // Its entries record `signature`, which only the general path reads.
        let whole = parse(&text);
        assert!(whole.is_some());
        assert!(text.contains("signature = ["));
        assert_eq!(stream(&text, 2, 1), None);
        let plain = text.replace("signature = [", "# signature = [");
        assert_eq!(stream(&plain, 2, 1), parse(&plain));
    }

    /// Whatever the whole parse refuses, or reads another way, the stream leaves to it:
    /// an error anywhere, late ones included, in any piece.
    #[test]
    fn anything_the_whole_parse_refuses_or_reads_otherwise_is_left_to_it() {
        let lock = generated(3);
        let text = lock.to_text();
        let last = lock.artifacts.last().unwrap();
        let first = &lock.artifacts[0];
        // A header in the second half, where a later piece reads.
        let late = text.rfind("[[artifact]]").unwrap();
        let swapped = {
            // The last two records' texts exchanged: out of order.
            let before = text[..late].rfind("[[artifact]]").unwrap();
            let end = crate::store::lockfile::tables_start(&text).unwrap_or(text.len());
            format!(
                "{}{}\n{}{}",
                &text[..before],
                text[late..end].trim_end(),
                &text[before..late],
                &text[end..]
            )
        };
        let edits: Vec<String> = vec![
            text.replacen(&last.digest, "zz", 1),
            text.replacen(&last.key, &last.key.to_uppercase(), 1),
            text.replacen("target = \"sm_90\"", "target = \"sm_9\"", 1),
            text.replacen("version = 3", "version = 1", 1),
            text.replacen("version = 3", "version = 99", 1),
            text.replacen(&format!("nvcc = \"{}\"", last.nvcc), "nvcc = \"13.x\"", 1),
            format!(
                "{}size = 3240 # a comment{}",
                &text[..late + 13],
                &text[late + 12..]
            ),
            text.replacen("name = \"gemm\"\n", "name = \"gemm\"\nother = 1\n", 1),
            text.replacen(&first.digest, &last.digest, 1),
            swapped,
            text.replace(
                "[[kernel]]\nname = \"tiny\"",
                "[[kernel]]\nname = \"t-iny\"",
            ),
            text.replace("grid = [\"1\"]", "grid = [\"1 +\"]"),
            format!("{text}\n[[artifact]]\nkernel = \"zz\"\n"),
            text.replacen("registers = 32", "registers = 32\nsignature = [\"ptr\"]", 1),
        ];
        for (i, edited) in edits.iter().enumerate() {
            assert_ne!(edited, &text, "edit {i} changed nothing");
            let whole = parse(edited);
            for threads in [1, 2, 5] {
                let streamed = stream(edited, threads, 1);
                // Taken only where the whole parse takes it, with the same records.
                assert!(
                    streamed.is_none() || streamed == whole,
                    "edit {i}, {threads} threads"
                );
            }
            if whole.is_none() {
                assert_eq!(stream(edited, 3, 1), None, "edit {i}");
            }
        }
        // Derived params need version 2; in version 1 they are an error, late or not.
        let derived = text.find("[artifact.derived]").expect("a derived param");
        assert!(derived > 0);
        let old = text.replacen("version = 3", "version = 1", 1);
        assert!(parse(&old).is_none() && stream(&old, 2, 1).is_none());
    }
}
