//! The store and the lock kept honest: `--locked`, `verify` (and `--rebuild`), `gc`, a
//! corrupt blob, a full disk, a read-only store, and the modes of what kart writes.

use std::time::Duration;

use crate::harness::{TestProject, stderr, stdout, text};
use crate::{GRID, GRID_BODY, grid_project};

#[test]
fn locked_catches_an_edited_source_without_compiling_and_explain_names_it() {
    let p = grid_project();
    p.ok(&["build"]);
    p.ok(&["build", "--locked"]);
    p.write(
        "kernels/grid/grid.cu",
        &format!("extern \"C\" __global__ void grid(float* out) {{\n{GRID_BODY} // edited\n}}\n"),
    );
    p.clear_log();
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(p.compiles(), 0, "--locked compiled");
    let err = stderr(&out);
    // Once per kernel and input, not once per artifact (6 of them here).
    assert!(
        err.contains("grid: 6 artifact(s) with changed keys (grid[A=1,B=16] sm_80 and 5 more)"),
        "{err}"
    );
    assert_eq!(
        err.matches("changed file kernels/grid/grid.cu").count(),
        1,
        "{err}"
    );

    let out = p.ok(&[
        "explain", "grid", "-p", "A=1", "-p", "B=16", "--target", "sm_90",
    ]);
    let s = stdout(&out);
    assert!(s.contains("differs from kart.lock"), "{s}");
    assert!(s.contains("changed file kernels/grid/grid.cu"), "{s}");
    assert!(s.contains("param A: 1"), "{s}");
    let out = p.kart(&["explain", "grid", "-p", "A=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn a_corrupt_blob_is_caught_by_verify_and_by_a_read() {
    let p = grid_project();
    p.ok(&["build"]);
    let verify = p.ok(&["verify"]);
    assert!(
        stdout(&verify).contains("6 blobs ok, 0 corrupt"),
        "{}",
        text(&verify)
    );
    let (rel, _) = p.blobs().remove(0);
    let path = p.root().join("artifacts/v1/blobs").join(&rel);
    let digest = rel
        .split('/')
        .next_back()
        .unwrap()
        .trim_end_matches(".zst")
        .to_string();
    // Valid zstd of other bytes: only the hash check can catch it.
    std::fs::write(&path, zstd::bulk::compress(b"not the cubin", 3).unwrap()).unwrap();
    let out = p.kart(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("corrupt blob {digest}")),
        "{}",
        text(&out)
    );
    assert!(!path.exists(), "corrupt blob not quarantined");

    // A read through the library refuses it too (re-plant it first).
    std::fs::write(&path, zstd::bulk::compress(b"not the cubin", 3).unwrap()).unwrap();
    let store = kart::store::Store::open(
        &p.root().join("artifacts"),
        kart::store::LockMode::Shared,
        Duration::from_secs(5),
    )
    .unwrap();
    let err = store.read_blob(&digest, None).unwrap_err();
    assert!(matches!(err, kart::Error::CorruptBlob { .. }), "{err}");
    drop(store);

    // The next build compiles the missing artifact again.
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 1);
}

#[test]
fn verify_rebuild_recompiles_a_sample_and_finds_it_identical() {
    let p = grid_project();
    p.ok(&["build"]);
    p.clear_log();
    let out = p.ok(&["verify", "--rebuild", "2", "--seed", "7"]);
    assert_eq!(p.compiles(), 2, "{}", text(&out));
    assert!(
        stdout(&out).contains("rebuilt 2 artifacts (seed 7): 0 differ"),
        "{}",
        text(&out)
    );
}

#[test]
fn gc_removes_what_the_lock_no_longer_names() {
    let p = grid_project();
    p.ok(&["build"]);
    p.write(
        "kernels/grid/kernel.toml",
        &format!(
            "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\ntargets = [\"sm_90\"]\n{GRID}"
        ),
    );
    p.ok(&["build"]);
    let dry = stdout(&p.ok(&["gc", "--dry-run"]));
    assert!(dry.contains("would remove 3 blobs"), "{dry}");
    assert_eq!(p.blobs().len(), 6);
    p.ok(&["gc"]);
    assert_eq!(p.blobs().len(), 3);
    p.ok(&["verify"]);
    p.ok(&["build", "--locked"]);
}

/// Unmounts on drop, even when the test fails.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The grid project with its store on a tmpfs of `size`, or `None` (with a visible
/// skip line) where mounting is not allowed.
fn project_on_small_disk(test: &str, size: &str) -> Option<(TestProject, Mount)> {
    let p = grid_project();
    p.write(
        "kernels/grid/kernel.toml",
        "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n[params]\nA = [1, 2, 3, 4, 5, 6, 7, 8]\nB = [16, 32]\n",
    );
    let store = p.root().join("artifacts");
    std::fs::create_dir_all(&store).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&store)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        crate::harness::skip(test, "cannot mount a tmpfs here (needs root)");
        return None;
    }
    Some((p, Mount(store)))
}

fn temp_leftovers(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut leftovers = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(".tmp-kart-") {
                leftovers.push(e.path());
            }
        }
    }
    leftovers
}

#[test]
fn a_full_disk_fails_clearly_and_leaves_the_store_consistent() {
    // 160 KiB: it fills after a few artifacts.
    let Some((p, mount)) = project_on_small_disk(
        "a_full_disk_fails_clearly_and_leaves_the_store_consistent",
        "160k",
    ) else {
        return;
    };
    let out = p.kart(&["build", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        text(&out)
    );
    // What was written is whole: verify finds nothing corrupt, and no temp file is left.
    let verify = p.kart(&["verify"]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(temp_leftovers(&mount.0).is_empty());
}

/// Found by the full-disk fault: nvcc "succeeds" with a cut-short cubin when the disk
/// is full, and kart blamed the toolchain.
#[test]
fn a_full_disk_during_the_smoke_compile_is_not_blamed_on_nvcc() {
    // 24 KiB: the store's folders fit, the smoke compile's files do not (16 to 28 KiB
    // do that; the toolchain's fingerprint is cached in kart's home, not on this disk).
    let Some((p, mount)) = project_on_small_disk(
        "a_full_disk_during_the_smoke_compile_is_not_blamed_on_nvcc",
        "24k",
    ) else {
        return;
    };
    let out = p.kart(&["build", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!err.contains("toolchain cannot compile"), "{err}");
    assert!(temp_leftovers(&mount.0).is_empty());
}

#[test]
fn a_read_only_store_serves_reads_and_refuses_writes_clearly() {
    let Some((p, mount)) = project_on_small_disk(
        "a_read_only_store_serves_reads_and_refuses_writes_clearly",
        "4m",
    ) else {
        return;
    };
    p.ok(&["build", "--jobs", "2"]);
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&mount.0)
        .status()
        .is_ok_and(|s| s.success());
    assert!(remounted, "cannot remount the test store read-only");
    // Reads work: list, verify, a build with everything present.
    p.ok(&["ls"]);
    p.ok(&["verify"]);
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    // Writes fail with the reason, and nothing panics.
    let out = p.kart(&["gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("read-only"), "{}", text(&out));
    p.write(
        "kernels/grid/kernel.toml",
        "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n[params]\nA = [9]\nB = [16]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("Read-only file system"),
        "{}",
        text(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", text(&out));
}

/// Files kart writes for people (the lock, the sidecars' writer, an exported module, a
/// materialized cubin, the store's blobs) follow the umask like any tool's.
#[test]
fn files_kart_writes_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let p = grid_project();
    for (umask, want) in [("022", 0o644), ("027", 0o640)] {
        let _ = std::fs::remove_dir_all(p.root().join("artifacts"));
        let _ = std::fs::remove_file(p.root().join("kart.lock"));
        let module = p.root().join("k.py");
        let _ = std::fs::remove_file(&module);
        let script = format!(
            "umask {umask} && \"$0\" build -q && \"$0\" export --python -o k.py grid:A=1,B=16 && \"$0\" path grid -p A=1 -p B=16 --target sm_90"
        );
        let out = p.kart_env_via_shell(&script);
        assert!(out.status.success(), "{}", text(&out));
        let materialized = std::path::PathBuf::from(stdout(&out).trim());
        let mut files = vec![p.root().join("kart.lock"), module, materialized];
        files.extend(
            p.blobs()
                .into_iter()
                .map(|(rel, _)| p.root().join("artifacts/v1/blobs").join(rel)),
        );
        for f in files {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, want, "umask {umask}: {} is {mode:o}", f.display());
        }
    }
}

#[test]
fn a_build_killed_before_its_folders_are_synced_leaves_what_the_next_build_takes_whole() {
    let p = grid_project();
    // Abort (as kill -9 would) with every blob and action entry renamed into place,
    // their shard folders not synced yet and the lock not written.
    let out = p.kart_env(
        &["build"],
        &[("KART_FAILPOINT", "write-atomic.before-folder-sync")],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        !p.root().join("kart.lock").exists(),
        "the lock was written before the folders were synced: {}",
        text(&out)
    );
    assert_eq!(p.compiles(), 6, "{}", text(&out));
    p.clear_log();
    let out = p.ok(&["build"]);
    assert_eq!(
        p.compiles(),
        0,
        "the killed build's blobs and entries were not all taken: {}",
        text(&out)
    );
    assert_eq!(crate::harness::lock_digests(&p).len(), 6, "{}", text(&out));
    assert!(temp_leftovers(&p.root().join("artifacts")).is_empty());
    p.ok(&["verify"]);
}
