//! The reliability campaigns in their short form (`kart-campaign … --short`): the same
//! programs that run longer on demand (see RELIABILITY.md). Each prints its figures;
//! a failed guarantee fails the test.

use crate::harness::{real_nvcc, repo_root, text};

fn campaign(name: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart-campaign"))
        .args([
            name,
            "--short",
            "--kart",
            env!("CARGO_BIN_EXE_kart"),
            "--nvcc",
        ])
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
