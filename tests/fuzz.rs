//! Property-based fuzzing of every parser of user- or network-controlled files: kart.toml,
//! kernel.toml, kart.lock, kart.attest, kart.tune, action entries, bundles, traces, fleet
//! and problems files, the package index's JSON and wheel archives. Inputs are the seed
//! corpus in `tests/corpus/` and the runtime crate's `tests/data/` (real files of this repository; the bundle and the wheel
//! are made by the test) mutated by proptest: bit flips, inserted tokens (brackets,
//! quotes, `../`, huge numbers, NUL, invalid UTF-8), 100,000 nested brackets or
//! parentheses, deletions and duplications. Properties: no panic and no stack
//! overflow; an accepted input names only 64-hex digests (so nothing it names can
//! become a path outside the store).
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
    /// 100,000 copies of one opening token: a reader that recurses without a bound
    /// overflows the stack and aborts the whole test binary.
    Nest(usize, usize),
}

const OPENERS: &[&[u8]] = &[b"(", b"[", b"{", b"!", b"{\"a\":", b"[[", b"min("];

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(
        prop_oneof![
            (any::<usize>(), 1u8..=255).prop_map(|(p, b)| Mutation::Flip(p, b)),
            (any::<usize>(), 0..TOKENS.len()).prop_map(|(p, t)| Mutation::Insert(p, t)),
            (any::<usize>(), 1usize..64).prop_map(|(p, n)| Mutation::Delete(p, n)),
            (any::<usize>(), 1usize..256).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
            (any::<usize>(), 0..OPENERS.len()).prop_map(|(p, t)| Mutation::Nest(p, t)),
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
            Mutation::Nest(p, t) => {
                let i = p % (v.len() + 1);
                v.splice(i..i, OPENERS[t].repeat(100_000));
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
    // The runtime crate's own tests read the same entry from its folder.
    fuzz(
        "action entry",
        &corpus("../../crates/kart-runtime/tests/data/action-entry.json"),
        |b| {
            let entry: kart::store::ActionEntry = serde_json::from_slice(b).map_err(|_| ())?;
            entry.validate().map_err(|_| ())?;
            Ok(vec![entry.key, entry.digest])
        },
    );
}

#[test]
fn fuzz_attest_and_tune() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    fuzz("kart.attest", &corpus("kart.attest"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let f = kart::deploy::attest::AttestFile::read(&path, Path::new("kart.attest"))
            .map_err(|_| ())?;
        Ok(f.records.into_iter().map(|r| r.digest).collect())
    });
    fuzz("kart.tune", &corpus("kart.tune"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let f =
            kart::deploy::tune::TuneFile::read(&path, Path::new("kart.tune")).map_err(|_| ())?;
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

#[test]
fn fuzz_deployment_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    fuzz("trace", &corpus("trace.jsonl"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let records = kart::trace::read(&path).map_err(|_| ())?;
        Ok(records
            .into_iter()
            .filter_map(|r| match r {
                kart::trace::TraceRecord::Launch { digest, .. } => Some(digest),
                kart::trace::TraceRecord::Fallback { .. } => None,
            })
            .collect())
    });
    fuzz("fleet file", &corpus("fleet.toml"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        kart::project::fleet::read_fleet_file(&path, Path::new("fleet.toml"))
            .map(|_| Vec::new())
            .map_err(|_| ())
    });
    fuzz("problems file", &corpus("problems.toml"), |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        kart::deploy::problems::read_problems(&path, Path::new("problems.toml"))
            .map(|_| Vec::new())
            .map_err(|_| ())
    });
    // A bundle of the corpus lock's first artifact, with stand-in bytes for its blob
    // (the index is what is fuzzed; blobs are checked against their digests anyway).
    let lock = kart::store::lockfile::Lockfile::parse(
        std::str::from_utf8(&corpus("kart.lock")).unwrap(),
        Path::new("kart.lock"),
    )
    .unwrap();
    let one = kart::store::lockfile::Lockfile::new(lock.artifacts[..1].to_vec());
    let seed = dir.path().join("seed.kartbundle");
    // Stand-in bytes would fail the writer's own check of every blob: the file is laid
    // out as the writer lays it out, unchecked.
    use kart::store::bundle::{BUNDLE_FORMAT, BlobBytes, BundleIndex, bundle_bytes};
    let index = BundleIndex {
        format: BUNDLE_FORMAT,
        kart: "0.1.0".into(),
        made_for: vec!["fuzz".into()],
        tune: String::new(),
        attest: String::new(),
    };
    let blob = BlobBytes {
        digest: one.artifacts[0].digest.clone(),
        size: one.artifacts[0].size,
        stored: vec![0u8; one.artifacts[0].size as usize],
        zstd: false,
    };
    let bundle = bundle_bytes(&index, &one.to_text(), vec![blob]).unwrap();
    std::fs::write(&seed, &bundle).unwrap();
    kart::store::bundle::Bundle::open(&seed).expect("the seed bundle opens");
    fuzz("bundle", &bundle, |b| {
        std::fs::write(&path, b).map_err(|_| ())?;
        let bundle = kart::store::bundle::Bundle::open(&path).map_err(|_| ())?;
        let rows = bundle.blobs().map_err(|_| ())?;
        Ok(bundle
            .lock()
            .map_err(|_| ())?
            .artifacts
            .iter()
            .map(|a| a.digest.clone())
            .chain(rows.into_iter().map(|b| b.digest))
            .collect())
    });
}

#[test]
fn fuzz_package_index_and_wheels() {
    fuzz("index page", &corpus("index-page.json"), |b| {
        let wheel = kart::install::index::pick_wheel(b, "nvidia-cuda-nvcc", "13.0.88", "x86_64")
            .map_err(|_| ())?;
        Ok(wheel.map(|w| w.sha256).into_iter().collect())
    });
    let dir = tempfile::tempdir().unwrap();
    let seed = {
        use std::io::Write;
        let mut bytes = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut bytes);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, text) in [
            ("pkg/include/a.h", "// a header\n#pragma once\n"),
            ("pkg/bin/tool", "#!/bin/sh\nexit 0\n"),
            ("pkg-1.0.dist-info/RECORD", "pkg/include/a.h,,\n"),
        ] {
            zip.start_file(name, options).unwrap();
            zip.write_all(text.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
        bytes.into_inner()
    };
    let wheel = dir.path().join("w.whl");
    let n = AtomicUsize::new(0);
    fuzz("wheel", &seed, |b| {
        std::fs::write(&wheel, b).map_err(|_| ())?;
        let out = dir
            .path()
            .join(format!("out{}", n.fetch_add(1, Ordering::Relaxed)));
        // The shared files go to a home beside `out` (its name starts with `out` too).
        let mut store =
            kart::install::shared::FileStore::open(&dir.path().join("out-home")).map_err(|_| ())?;
        kart::install::wheel::unpack(&wheel, &out, &mut store).map_err(|_| ())?;
        // Everything unpacked lies inside `out`: a name that escapes is reported as one.
        let escaped = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with("out") && name != "w.whl")
            .collect::<Vec<_>>();
        let _ = std::fs::remove_dir_all(&out);
        Ok(escaped
            .into_iter()
            .map(|n| format!("escaped {n}"))
            .collect())
    });
}
