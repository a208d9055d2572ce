//! Property-based fuzzing of every parser of user- or network-controlled files: kart.toml,
//! kernel.toml, kart.lock, kart.attest, kart.tune and action entries. Inputs are the
//! seed corpus in `tests/corpus/` (real files of this repository) mutated by proptest:
//! bit flips, inserted tokens (brackets, quotes, `../`, huge numbers, NUL, invalid
//! UTF-8), deletions and duplications. Properties: no panic; an accepted input names
//! only 64-hex digests (so nothing it names can become a path outside the store).
//!
//! `KART_FUZZ_CASES` sets the cases per parser (default 300; the long form uses 20000).
//! Prints inputs tried, rejected, panics, escapes and the peak memory of the process.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use kart::store::sidecar::Sidecar as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const TOKENS: &[&[u8]] = &[
    b"[",
    b"]",
    b"[[",
    b"{",
    b"}",
    b"\"",
    b"'",
    b"=",
    b"\n",
    b"../",
    b"/etc/passwd",
    b"99999999999999999999999",
    b"-1",
    b"nan",
    b"inf",
    b"\0",
    b"\xff\xfe",
    b"\\u0000",
    b"[[artifact]]",
    b"version = 2",
    b"digest = \"",
    b"sm_90a",
    b"A=1,B=2",
];

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, usize),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(
        prop_oneof![
            (any::<usize>(), 1u8..=255).prop_map(|(p, b)| Mutation::Flip(p, b)),
            (any::<usize>(), 0..TOKENS.len()).prop_map(|(p, t)| Mutation::Insert(p, t)),
            (any::<usize>(), 1usize..64).prop_map(|(p, n)| Mutation::Delete(p, n)),
            (any::<usize>(), 1usize..256).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
        ],
        1..8,
    )
}

fn apply(seed: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for m in muts {
        let len = v.len().max(1);
        match *m {
            Mutation::Flip(p, b) => {
                if !v.is_empty() {
                    let i = p % v.len();
                    v[i] ^= b;
                }
            }
            Mutation::Insert(p, t) => {
                let i = p % (v.len() + 1);
                v.splice(i..i, TOKENS[t].iter().copied());
            }
            Mutation::Delete(p, n) => {
                let i = p % len;
                let end = (i + n).min(v.len());
                if i < end {
                    v.drain(i..end);
                }
            }
            Mutation::Duplicate(p, n) => {
                let i = p % len;
                let end = (i + n).min(v.len());
                if i < end {
                    let copy = v[i..end].to_vec();
                    v.splice(end..end, copy);
                }
            }
        }
    }
    v
}

struct Tally {
    tried: AtomicUsize,
    rejected: AtomicUsize,
    escapes: AtomicUsize,
}

fn cases() -> u32 {
    std::env::var("KART_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

fn corpus(name: &str) -> Vec<u8> {
    let root =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    std::fs::read(Path::new(&root).join("tests/corpus").join(name)).unwrap()
}

/// Fuzzes one parser: `parse` gets the mutated bytes and returns Ok(digests named by an
/// accepted input) or Err(()) for a rejection. A panic fails the property.
fn fuzz(name: &str, seed: &[u8], parse: impl Fn(&[u8]) -> Result<Vec<String>, ()>) {
    let tally = Tally {
        tried: AtomicUsize::new(0),
        rejected: AtomicUsize::new(0),
        escapes: AtomicUsize::new(0),
    };
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&mutations(), |muts| {
        let input = apply(seed, &muts);
        tally.tried.fetch_add(1, Ordering::Relaxed);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(&input)));
        match outcome {
            Err(_) => prop_assert!(
                false,
                "{name}: panic on {:?}",
                String::from_utf8_lossy(&input)
            ),
            Ok(Err(())) => {
                tally.rejected.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(digests)) => {
                for d in &digests {
                    if !kart::digest::is_sha256_hex(d) {
                        tally.escapes.fetch_add(1, Ordering::Relaxed);
                        prop_assert!(false, "{name}: accepted a non-digest name {d:?}");
                    }
                }
            }
        }
        Ok(())
    });
    let peak_kib = {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: fills the struct.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        usage.ru_maxrss
    };
    println!(
        "fuzz {name}: {} inputs tried, {} rejected with an error, 0 panics, {} escapes; peak memory of the process {} MiB",
        tally.tried.load(Ordering::Relaxed),
        tally.rejected.load(Ordering::Relaxed),
        tally.escapes.load(Ordering::Relaxed),
        peak_kib / 1024
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

fn text(bytes: &[u8]) -> Result<&str, ()> {
    std::str::from_utf8(bytes).map_err(|_| ())
}

#[test]
fn fuzz_lock() {
    fuzz("kart.lock", &corpus("kart.lock"), |b| {
        let lock = kart::store::lockfile::Lockfile::parse(text(b)?, Path::new("kart.lock"))
            .map_err(|_| ())?;
        Ok(lock
            .artifacts
            .iter()
            .flat_map(|a| [a.digest.clone(), a.key.clone()])
            .collect())
    });
}

#[test]
fn fuzz_action_entry() {
    fuzz("action entry", &corpus("action-entry.json"), |b| {
        let entry: kart::store::ActionEntry = serde_json::from_slice(b).map_err(|_| ())?;
        entry.validate().map_err(|_| ())?;
        Ok(vec![entry.key, entry.digest])
    });
}

#[test]
fn fuzz_attest_and_tune() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    fuzz("kart.attest", &corpus("kart.attest"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let f = kart::attest::AttestFile::read(&path, Path::new("kart.attest")).map_err(|_| ())?;
        Ok(f.records.into_iter().map(|r| r.digest).collect())
    });
    fuzz("kart.tune", &corpus("kart.tune"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let f = kart::tune::TuneFile::read(&path, Path::new("kart.tune")).map_err(|_| ())?;
        Ok(f.records.into_iter().map(|r| r.digest).collect())
    });
}

#[test]
fn fuzz_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("kernels/flash_attn")).unwrap();
    std::fs::write(root.join("kernels/flash_attn/flash_attn.cu"), "// fuzz\n").unwrap();
    let good_kart = corpus("kart.toml");
    let good_kernel = corpus("kernel.toml");
    fuzz("kart.toml", &good_kart, |b| {
        std::fs::write(root.join("kart.toml"), b).map_err(|_| ())?;
        std::fs::write(root.join("kernels/flash_attn/kernel.toml"), &good_kernel)
            .map_err(|_| ())?;
        kart::project::Project::load(root)
            .map(|_| Vec::new())
            .map_err(|_| ())
    });
    fuzz("kernel.toml", &good_kernel, |b| {
        std::fs::write(root.join("kart.toml"), &good_kart).map_err(|_| ())?;
        std::fs::write(root.join("kernels/flash_attn/kernel.toml"), b).map_err(|_| ())?;
        let project = kart::project::Project::load(root).map_err(|_| ())?;
        // Accepted sources must resolve inside the project.
        for k in &project.kernels {
            for s in &k.sources {
                if s.is_absolute() || s.components().any(|c| c == std::path::Component::ParentDir) {
                    return Ok(vec![format!("source {}", s.display())]);
                }
            }
        }
        Ok(Vec::new())
    });
}
