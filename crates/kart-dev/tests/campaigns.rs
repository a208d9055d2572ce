//! The reliability campaigns in their short form (`kart-campaign … --short`): the same
//! programs that run longer on demand (see RELIABILITY.md). Each prints its figures;
//! a failed guarantee fails the test.

use std::path::{Path, PathBuf};
use std::process::Output;

/// The repository's root (two folders above this crate).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pinned nvcc that `scripts/setup` installs.
fn real_nvcc() -> PathBuf {
    kart_testkit::pinned_nvcc(&repo_root())
}

/// The `kart` binary of this build: another package's binary, so cargo names no
/// path for it; it lies beside this test's folder (`target/<profile>/kart`), built by
/// the same `cargo test --workspace` (kart's own tests need it).
fn kart_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let kart = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("kart"))
        .expect("a test binary lives in target/<profile>/deps");
    assert!(
        kart.is_file(),
        "no kart binary at {}: run `cargo test --workspace` (or `cargo build -p kart` with this profile) first",
        kart.display()
    );
    kart
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn campaign(name: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart-campaign"))
        .args([name, "--short", "--kart"])
        .arg(kart_binary())
        .arg("--nvcc")
        .arg(real_nvcc())
        .current_dir(repo_root())
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn crash_campaign_short() {
    campaign("crash");
}

#[test]
fn corruption_campaign_short() {
    campaign("corruption");
}

#[test]
fn concurrency_campaign_short() {
    campaign("concurrency");
}
