//! CPU-side integration tests: the real `kart` binary and the real pinned nvcc on small
//! fixture kernels (installed by `scripts/setup`). No GPU needed.
//!
//! Over 600 lines on purpose: the command line's tests that need no remote, no header
//! library and no variant (those have their own files beside this one).

mod bounds;
mod executor;
mod fleet;
mod harness;
mod language;
mod libraries;
mod malformed;
mod reapi;
mod remote;
mod s3;
mod sharing;
mod templates;
mod toolchain;
mod trust;
mod usability;
mod variants;

use std::time::{Duration, Instant};

use harness::{TestProject, stderr, stdout, text};

const GRID: &str = "[params]\nA = [1, 2]\nB = [16, 32]\n\n[[exclude]]\nA = 2\nB = 32\n";
const GRID_BODY: &str = "out[threadIdx.x] = A * 1000 + B;";

fn grid_project() -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    p
}

#[test]
fn builds_a_grid_for_two_targets_and_a_noop_rebuild_runs_no_nvcc() {
    let p = grid_project();
    p.ok(&["build", "--jobs", "2"]);
    // 2×2 grid minus one excluded config, × 2 targets.
    assert_eq!(p.compiles(), 6);
    // Each action entry records how long its compile took (the next build starts the
    // slowest kernels first from it).
    let actions = p.root().join("artifacts/v1/actions");
    let mut entries = 0;
    for shard in std::fs::read_dir(&actions).unwrap().flatten() {
        for f in std::fs::read_dir(shard.path()).unwrap().flatten() {
            let e: serde_json::Value =
                serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
            assert_eq!(e["format"], 3, "{e:#}");
            assert!(e["compile_ms"].as_u64().is_some_and(|ms| ms > 0), "{e:#}");
            entries += 1;
        }
    }
    assert_eq!(entries, 6);
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 6, "{lock}");
    assert!(
        !lock.contains("A = 2\nB = 32"),
        "excluded config built:\n{lock}"
    );
    let ls = stdout(&p.ok(&["ls"]));
    assert_eq!(ls.lines().count(), 7, "{ls}");
    assert!(ls.contains("A=1,B=16") && ls.contains("sm_90"), "{ls}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 6);

    p.clear_log();
    let lock_before = p.read("kart.lock");
    let out = p.ok(&["build"]);
    assert_eq!(
        p.compiles(),
        0,
        "no-op rebuild ran nvcc: {:?}",
        p.compile_lines()
    );
    assert!(
        std::fs::read_to_string(&p.nvcc_log)
            .unwrap_or_default()
            .is_empty(),
        "no-op rebuild ran nvcc at all (even --version)"
    );
    assert!(
        stderr(&out).contains("0 compiled, 6 from the store"),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("kart.lock"), lock_before);
}

#[test]
fn adding_a_grid_value_builds_only_the_new_configs() {
    let p = grid_project();
    p.ok(&["build"]);
    p.clear_log();
    p.write(
        "kernels/grid/kernel.toml",
        &format!(
            "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n{}",
            GRID.replace("A = [1, 2]", "A = [1, 2, 3]")
        ),
    );
    p.ok(&["build"]);
    // A=3 with B=16 and B=32, for two targets.
    assert_eq!(p.compiles(), 4, "{:?}", p.compile_lines());
    assert!(p.compile_lines().iter().all(|l| l.contains("-DA=3")));
}

#[test]
fn editing_a_declared_include_rebuilds_exactly_the_kernels_that_declare_it() {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/common/scale.h", "#define SCALE 2\n");
    p.write(
        "kernels/uses/uses.cu",
        "#include \"scale.h\"\nextern \"C\" __global__ void uses(float* o) { o[0] = SCALE; }\n",
    );
    p.write(
        "kernels/uses/kernel.toml",
        "name = \"uses\"\nsources = [\"uses.cu\"]\nentry = [\"uses\"]\ninclude = [\"../common\"]\n",
    );
    p.kernel("plain", "out[0] = 1;", "");
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 2);
    p.clear_log();
    p.write("kernels/common/scale.h", "#define SCALE 3\n");
    p.ok(&["build"]);
    let lines = p.compile_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("uses.cu"));
}

#[test]
fn an_undeclared_include_is_an_error_naming_the_folder_to_add() {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/common/scale.h", "#define SCALE 2\n");
    p.write(
        "kernels/sneaky/sneaky.cu",
        "#include \"../common/scale.h\"\nextern \"C\" __global__ void sneaky(float* o) { o[0] = SCALE; }\n",
    );
    p.write(
        "kernels/sneaky/kernel.toml",
        "name = \"sneaky\"\nsources = [\"sneaky.cu\"]\nentry = [\"sneaky\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("undeclared include `kernels/common/scale.h`"),
        "{err}"
    );
    assert!(err.contains("include = [\"../common\"]"), "{err}");
    assert!(
        !p.root().join("kart.lock").exists(),
        "a failed build wrote the lock"
    );
}

#[test]
fn a_missing_entry_symbol_fails_and_names_what_is_there() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.write(
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\", \"nope\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("missing entry symbol `nope`"), "{err}");
    assert!(err.contains("defines: k"), "{err}");
}

#[test]
fn a_config_that_does_not_compile_fails_alone() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel(
        "k",
        "#if V == 2\n    this does not compile;\n#endif\n    out[0] = V;",
        "[params]\nV = [1, 2, 3]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("2 of 6 artifacts failed"), "{err}");
    assert!(err.contains("k[V=2] sm_80: nvcc failed"), "{err}");
    assert!(err.contains("│"), "nvcc's stderr is not framed:\n{err}");
    // The failed build wrote no lock; the four that compiled wait in the store.
    assert!(!p.root().join("kart.lock").exists());
    // Without the failing value, the rest comes from the store: no compile.
    p.write(
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nV = [1, 3]\n",
    );
    p.clear_log();
    let out = p.ok(&["build"]);
    assert_eq!(p.compiles(), 0, "{}", text(&out));
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 4, "{lock}");
}

#[test]
fn two_clean_builds_in_two_folders_are_byte_identical() {
    let a = grid_project();
    let b = grid_project();
    b.write("kart.toml", &a.read("kart.toml"));
    a.ok(&["build", "--jobs", "1"]);
    b.ok(&["build", "--jobs", "2"]);
    assert_eq!(a.read("kart.lock"), b.read("kart.lock"));
    let (ba, bb) = (a.blobs(), b.blobs());
    assert_eq!(ba.len(), 6);
    assert!(ba == bb, "blobs differ between the two folders");
    assert!(!a.read("kart.lock").contains(a.root().to_str().unwrap()));
}

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
fn a_hung_nvcc_is_killed_at_the_timeout_with_its_children() {
    let p = TestProject::new(&["sm_90"]);
    // The source mentions MODE, so it is passed as -DMODE=…, which the wrapper watches.
    p.kernel(
        "k",
        "#ifdef MODE\nout[0] = 1;\n#endif",
        "[params]\nMODE = [\"hang\", \"ok\"]\n",
    );
    let pids = p.root().join("pids");
    let start = Instant::now();
    let out = p.kart_env(
        &["build", "--timeout", "2"],
        &[("KART_TEST_PIDS", pids.to_str().unwrap())],
    );
    let elapsed = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("k[MODE=hang] sm_90: nvcc timed out after 2 s"),
        "{err}"
    );
    assert!(
        err.contains("hanging on purpose"),
        "stderr of the killed nvcc not shown: {err}"
    );
    // The good config was built into the store (the failed build wrote no lock): a
    // build of it alone compiles nothing.
    assert!(!p.root().join("kart.lock").exists());
    p.clear_log();
    p.ok(&["build", "-p", "MODE=ok"]);
    assert_eq!(p.compiles(), 0, "the good config was not built");
    assert!(p.read("kart.lock").contains("MODE = \"ok\""));
    // The grandchild that held stderr open is gone too. Its SIGKILL went out with the
    // group's; the kernel may take a moment to deliver it, so look for a few seconds.
    let pid = std::fs::read_to_string(&pids).unwrap().trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status.is_empty() || status.contains("State:\tZ") || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.is_empty() || status.contains("State:\tZ"),
        "grandchild {pid} survived:\n{status}"
    );
    // Not a timing assertion: a kart that waited for the grandchild would take 300 s.
    assert!(elapsed < Duration::from_secs(120), "{elapsed:?}");
}

#[test]
fn shards_meet_in_one_store_and_give_the_single_machine_lock() {
    let single = grid_project();
    single.ok(&["build"]);
    let p = grid_project();
    p.ok(&["build", "--shard", "1/2"]);
    let first = p.compiles();
    assert!(
        !p.root().join("kart.lock").exists(),
        "a shard wrote the lock"
    );
    p.ok(&["build", "--shard", "2/2"]);
    assert_eq!(p.compiles(), 6, "shards overlap or miss artifacts");
    assert!((2..=4).contains(&first), "unbalanced shard: {first}");
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    assert_eq!(p.read("kart.lock"), single.read("kart.lock"));
    let out = p.kart(&["build", "--shard", "3/2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
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

#[test]
fn nvcc_environment_overrides_are_refused() {
    let p = grid_project();
    let out = p.kart_env(&["build"], &[("NVCC_APPEND_FLAGS", "-G")]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(stderr(&out).contains("NVCC_APPEND_FLAGS"), "{}", text(&out));
}

#[test]
fn a_different_nvcc_release_is_refused() {
    let p = grid_project();
    p.write(
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\n[toolchain]\nnvcc = \"12.4\"\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("release 13.0.88, but kart.toml requires 12.4"),
        "{err}"
    );
    assert!(err.contains("kart toolchain install"), "{err}");
}

#[test]
fn a_missing_nvcc_is_an_environment_error() {
    let p = grid_project();
    let out = p.kart_env(&["build"], &[("KART_NVCC", "/nonexistent/bin/nvcc")]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        stderr(&out).contains("nvcc not found at `/nonexistent/bin/nvcc`"),
        "{}",
        text(&out)
    );
}

#[test]
fn ptx_is_kept_when_asked() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "ptx = true\n");
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("kind = \"ptx\"") && lock.contains("kind = \"cubin\""),
        "{lock}"
    );
}

/// The smoke kernel `kart init` writes (its source ships inside the binary) is the
/// repository's: a project made by `kart init` in another folder builds it to the very
/// digests the repository's kart.lock names.
#[test]
fn kart_init_writes_the_smoke_kernel_the_repository_locks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
            .args(args)
            .current_dir(dir)
            .env("KART_NVCC", harness::real_nvcc())
            .env_remove("KART_REMOTE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    };
    run(tmp.path(), &["init", "p"]);
    let dir = tmp.path().join("p");
    run(&dir, &["build"]);
    let digests = |lock: &str| -> Vec<(String, String)> {
        let lock: toml::Value = toml::from_str(lock).unwrap();
        let mut out: Vec<(String, String)> = lock["artifact"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["kernel"].as_str() == Some("smoke"))
            .map(|a| {
                let field = |k: &str| a[k].as_str().unwrap().to_string();
                (field("target"), field("digest"))
            })
            .collect();
        out.sort();
        out
    };
    let repo = std::fs::read_to_string(harness::repo_root().join("kart.lock")).unwrap();
    let made = std::fs::read_to_string(dir.join("kart.lock")).unwrap();
    assert_eq!(digests(&made).len(), 2, "{made}");
    assert_eq!(digests(&made), digests(&repo));
}

#[test]
fn a_signature_that_does_not_match_the_cubin_fails_the_build() {
    let p = TestProject::new(&["sm_90"]);
    // `grid(float* out)` takes one pointer; the signature claims a float too.
    p.kernel(
        "grid",
        GRID_BODY,
        &format!("[signature]\ngrid = [\"ptr\", \"f32\"]\n{GRID}"),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("signature of `grid` is [ptr, f32]")
            && err.contains("takes 1 parameters of sizes [8]"),
        "{err}"
    );
    p.kernel(
        "grid",
        GRID_BODY,
        &format!("[signature]\ngrid = [\"ptr\"]\n{GRID}"),
    );
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("params = [8]\nsignature = [\"ptr\"]"),
        "{lock}"
    );
}

#[test]
fn exports_a_python_module_that_imports_without_a_gpu_and_checks_everything() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel(
        "grid",
        GRID_BODY,
        &format!("default = {{ A = 1, B = 16 }}\n[signature]\ngrid = [\"ptr\"]\n{GRID}"),
    );
    // A second entry point with an int after the pointer, for argument checks.
    p.write(
        "kernels/grid/grid.cu",
        &format!(
            "extern \"C\" __global__ void grid(float* out, int n) {{\n if (threadIdx.x < n) {{ {GRID_BODY} }}\n}}\n"
        ),
    );
    p.write(
        "kernels/grid/kernel.toml",
        &format!(
            "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\ndefault = {{ A = 1, B = 16 }}\n[derived]\nWAYS = \"A + 1\"\n[launch]\ngrid = [\"cdiv(N, B)\", \"WAYS\"]\nblock = [\"B\"]\nproblem = [\"N\"]\nshared_mem = \"B * 4\"\n[signature]\ngrid = [\"ptr\", \"i32\"]\n{GRID}"
        ),
    );
    p.ok(&["build"]);
    // Several configs, no selection: the default only; a named partial config adds A=2.
    let module = p.root().join("grid_kernels.py");
    let out = p.ok(&[
        "export",
        "--python",
        "-o",
        module.to_str().unwrap(),
        "grid",
        "grid:A=2,B=16",
    ]);
    assert!(stderr(&out).contains("4 cubins"), "{}", text(&out));
    let repo = harness::repo_root();
    let check = std::process::Command::new("python3")
        .arg(repo.join("tests/python/check_export.py"))
        .arg(&module)
        .arg(repo.join("crates/kart-runtime/tests/data/resolution.json"))
        .arg(p.root().join("kart.lock"))
        .arg(repo.join("crates/kart-runtime/tests/data/expr.json"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        stdout(&check).contains("all checks passed"),
        "{}",
        text(&check)
    );

    let ruff = repo.join(".toolchain/pytools/bin/ruff");
    assert!(
        ruff.is_file(),
        "ruff is missing at {}: run scripts/test (it installs it)",
        ruff.display()
    );
    let lint = std::process::Command::new(ruff)
        .args(["check", "--isolated", "--no-cache"])
        .arg(&module)
        .output()
        .unwrap();
    assert!(lint.status.success(), "ruff: {}", text(&lint));

    // Without a default and with several configs, the user must say which.
    p.write(
        "kernels/grid/kernel.toml",
        &format!("name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n{GRID}"),
    );
    p.ok(&["build"]);
    let out = p.kart(&["export", "--python", "-o", "x.py"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("--all-configs"), "{}", text(&out));
    let out = p.ok(&[
        "export",
        "--python",
        "-o",
        "x.py",
        "--all-configs",
        "--target",
        "sm_90",
    ]);
    assert!(stderr(&out).contains("3 cubins"), "{}", text(&out));
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
        harness::skip(test, "cannot mount a tmpfs here (needs root)");
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
    let Some((p, mount)) = project_on_small_disk(
        "a_full_disk_during_the_smoke_compile_is_not_blamed_on_nvcc",
        "48k",
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

#[test]
fn completions_are_generated_by_clap_for_each_shell() {
    let p = TestProject::new(&["sm_90"]);
    // Each shell's code calls kart back with KART_COMPLETE set (the candidates
    // themselves are checked in usability.rs).
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = p.ok(&["completions", shell]);
        let script = stdout(&out);
        assert!(
            script.contains("kart") && script.contains("KART_COMPLETE"),
            "{shell}: {script}"
        );
    }
    let out = p.kart(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn doctor_summarizes_without_a_gpu_and_reports_json() {
    let p = grid_project();
    p.ok(&["build"]);
    let out = p.ok(&["doctor"]);
    let shown = stdout(&out);
    assert!(shown.contains("kart.lock: 6 artifacts"), "{shown}");
    let out = p.ok(&["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["lock_artifacts"], 6);
    assert!(
        report["nvcc"]["ok"]["release"]
            .as_str()
            .unwrap()
            .starts_with("13.0")
    );
    // This machine may or may not have a GPU; with one, every artifact is accounted for.
    for gpu in report["gpus"].as_array().unwrap() {
        if gpu["total"].is_number() {
            let not: u64 = gpu["not_loadable"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["artifacts"].as_array().unwrap().len() as u64)
                .sum();
            assert_eq!(gpu["loadable"].as_u64().unwrap() + not, 6, "{gpu}");
        }
    }
}

/// kart draws no color of its own; clap's help, the one styled output, follows
/// `NO_COLOR` even on a terminal. `script` gives the child a pseudo-terminal.
#[test]
fn no_color_is_respected_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        harness::skip(
            "no_color_is_respected_on_a_terminal",
            "no `script` (util-linux) to make a terminal",
        );
        return;
    }
    let run = |no_color: bool| {
        let mut cmd = std::process::Command::new("script");
        cmd.args(["-qec"])
            .arg(format!("{} build --help", env!("CARGO_BIN_EXE_kart")))
            .arg("/dev/null")
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE")
            .env("TERM", "xterm-256color");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let colored = run(false);
    let plain = run(true);
    assert!(
        colored.contains('\u{1b}'),
        "a terminal gets styled help: {colored:?}"
    );
    assert!(!plain.contains('\u{1b}'), "NO_COLOR=1 gets none: {plain:?}");
    assert!(plain.contains("--timeout"), "{plain}");
}

/// A kernel whose grid is narrowed by `require` and which derives a param.
fn rules_project(require: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "tile",
        "out[threadIdx.x] = BM * 1000 + WARPS * 10 + ROWS;",
        &format!(
            "require = [{require}]\n[derived]\nROWS = \"BM / WARPS\"\n[params]\nBM = [32, 64, 128]\nWARPS = [1, 2, 4, 8]\n"
        ),
    );
    p
}

#[test]
fn require_filters_the_grid_and_derived_params_reach_nvcc_the_lock_and_ls() {
    let p = rules_project("\"ROWS == 16 || ROWS == 32\", \"WARPS <= 4\"");
    let out = p.ok(&["build", "--explain-grid"]);
    let shown = stdout(&out);
    assert!(
        shown.contains("tile: 12 raw combinations")
            && shown.contains("require \"ROWS == 16 || ROWS == 32\"  removes 6")
            && shown.contains("removes 1\n")
            && shown.contains("5 configs kept, each with derived ROWS"),
        "{shown}"
    );
    assert_eq!(p.compiles(), 0, "--explain-grid compiles nothing");
    p.ok(&["build"]);
    // Kept: (32,1) (32,2) (64,2) (64,4) (128,4); (128,8) is removed by WARPS <= 4.
    assert_eq!(p.compiles(), 5);
    let lines = p.compile_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("-DBM=64") && l.contains("-DROWS=16")),
        "{lines:?}"
    );
    let lock = p.read("kart.lock");
    assert!(lock.contains("[artifact.derived]\nROWS = 32"), "{lock}");
    let out = p.ok(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 5);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["derived"]["ROWS"].is_number())
    );
    let out = p.ok(&["ls"]);
    assert!(stdout(&out).contains("BM=64,WARPS=4 "), "{}", stdout(&out));
    // --wide: a column per param and derived param.
    let wide = stdout(&p.ok(&["ls", "--wide"]));
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(&header[..4], ["KERNEL", "BM", "WARPS", "ROWS"], "{wide}");
    assert!(
        wide.lines()
            .any(|l| l.split_whitespace().take(4).eq(["tile", "64", "4", "16"])),
        "{wide}"
    );
    let out = p.ok(&["explain", "tile", "-p", "BM=64", "-p", "WARPS=2"]);
    assert!(
        stdout(&out).contains("derived ROWS: 32"),
        "{}",
        stdout(&out)
    );
    let out = p.ok(&["explain", "tile", "-p", "BM=64", "-p", "WARPS=2", "--json"]);
    let explained: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        explained["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "derived ROWS" && i["value"] == "32"),
        "{explained}"
    );
    assert!(
        explained["lock"]
            .as_str()
            .unwrap()
            .starts_with("matches kart.lock")
    );
    let out = p.ok(&["build", "--json"]);
    let built: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(built["summary"]["selected"], 5, "{built}");
    assert_eq!(built["summary"]["compiled"], 0, "{built}");

    // Rules written differently that keep the same configs change no key.
    let before = p.read("kart.lock");
    let q = rules_project("\"BM / WARPS >= 16 && BM / WARPS <= 32\", \"WARPS * 2 <= 8\"");
    std::fs::copy(
        q.root().join("kernels/tile/kernel.toml"),
        p.root().join("kernels/tile/kernel.toml"),
    )
    .unwrap();
    p.ok(&["build", "--locked"]);
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    assert_eq!(p.read("kart.lock"), before);
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
fn ls_filters_by_kernel_and_param_and_names_what_exists() {
    let p = grid_project();
    p.kernel("other", "out[0] = 1.0f;", "");
    p.ok(&["build"]);
    let all = stdout(&p.ok(&["ls"]));
    assert_eq!(all.lines().count(), 1 + 6 + 2, "{all}");
    let grid = stdout(&p.ok(&["ls", "grid"]));
    assert_eq!(grid.lines().count(), 1 + 6, "{grid}");
    assert!(!grid.contains("other"), "{grid}");
    let one = stdout(&p.ok(&["ls", "grid", "-p", "A=2", "--json"]));
    let rows: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{one}");
    let out = p.kart(&["ls", "gird"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("lists no kernel `gird`; it lists grid, other"),
        "{}",
        text(&out)
    );
}

#[test]
fn one_compiler_error_is_shown_once_and_fail_fast_stops_at_it() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel(
        "broken",
        "    this does not compile;",
        "[params]\nA = [1, 2, 3]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("6 of 6 artifacts failed"), "{err}");
    // nvcc's message appears once; the other five name the config it was shown for.
    assert_eq!(
        err.matches("errors detected in the compilation").count(),
        1,
        "{err}"
    );
    assert_eq!(err.matches("(the same nvcc output as").count(), 5, "{err}");
    p.clear_log();
    let out = p.kart(&["build", "--fail-fast", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(p.compiles(), 1, "{}", text(&out));
    assert!(
        stderr(&out).contains("--fail-fast: 5 artifact(s) not compiled"),
        "{}",
        text(&out)
    );
}

#[test]
fn explain_grid_prints_json_when_asked() {
    let p = rules_project("\"BM % (16 * WARPS) == 0\"");
    let out = p.ok(&["build", "--explain-grid", "--json"]);
    let reports: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let first = &reports[0];
    assert!(first["raw"].as_u64().unwrap() >= first["kept"].as_u64().unwrap());
    assert!(
        first["steps"].as_array().is_some_and(|s| !s.is_empty()),
        "{reports}"
    );
}

#[test]
fn tune_run_says_what_it_cannot_run() {
    let p = grid_project();
    let out = p.ok(&["tune", "grid", "--run"]);
    assert!(
        stderr(&out).contains("grid: no tuning program"),
        "{}",
        text(&out)
    );
    let toml = p.read("kernels/grid/kernel.toml");
    p.write(
        "kernels/grid/kernel.toml",
        &format!(
            "{toml}\n[tune]\nnearest = [\"N\"]\nprogram = [\"target/release/examples/grid_tuner\", \"tune\"]\n"
        ),
    );
    let out = p.kart(&["tune", "--run"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        stderr(&out).contains("does not exist")
            && stderr(&out).contains("cargo build --release --example grid_tuner"),
        "{}",
        text(&out)
    );
}
