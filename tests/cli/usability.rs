//! What a new user meets first: one broken kernel never blocks the others, errors point
//! at the line to fix and name what exists, completions know the project.

use crate::harness::{TestProject, lock_digests, stderr, stdout, text};

/// `good` and `bad`, both built.
fn two_kernels() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("good", "out[0] = 1.0f;", "");
    p.kernel("bad", "out[0] = 2.0f;", "");
    p.ok(&["build"]);
    p
}

#[test]
fn a_broken_kernel_blocks_no_command_about_another() {
    let p = two_kernels();
    let lock = p.read("kart.lock");
    let bad_record = |lock: &str| {
        let start = lock.find("kernel = \"bad\"").unwrap();
        lock[start..start + 200].to_string()
    };
    let before = bad_record(&lock);
    // `bad` names a source that does not exist; `good` changes.
    p.write(
        "kernels/bad/kernel.toml",
        "name = \"bad\"\nsources = [\"gone.cu\"]\nentry = [\"bad\"]\n",
    );
    p.kernel("good", "out[0] = 3.0f;", "");

    for args in [&["ls", "good"][..], &["path", "good", "--target", "sm_90"]] {
        p.ok(args);
    }
    p.ok(&["build", "good"]);
    assert_eq!(p.compiles(), 3, "{:?}", p.compile_lines());

    // The whole project: the others are built, the broken one is reported, its
    // records stay as they were.
    p.kernel("good", "out[0] = 4.0f;", "");
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kernels/bad/kernel.toml:2:") && err.contains("gone.cu"),
        "{err}"
    );
    assert!(
        err.contains("1 kernel(s) could not be read: `bad` (kernels/bad/kernel.toml)"),
        "{err}"
    );
    let lock = p.read("kart.lock");
    assert_eq!(bad_record(&lock), before, "{lock}");
    assert_eq!(lock_digests(&p).len(), 2, "{lock}");
    p.ok(&["build", "good"]);
    assert_eq!(p.compiles(), 4, "the whole build compiled `good` already");

    // Commands about the broken kernel, and `--locked`, say why.
    for args in [
        &["ls", "bad"][..],
        &["build", "bad"],
        &["build", "--locked"],
    ] {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("kernels/bad/kernel.toml:2:"),
            "{args:?}: {}",
            text(&out)
        );
    }
}

#[test]
fn a_template_entry_that_names_no_template_is_reported_at_its_line() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/tile/tile.cu",
        "template <int BM>\n__global__ void tile(float *out) { out[threadIdx.x] = BM; }\n",
    );
    p.write(
        "kernels/tile/kernel.toml",
        "name = \"tile\"\nsources = [\"tile.cu\"]\nentry = [\"tiles<BM>\"]\n[params]\nBM = [64, 128, 256]\n",
    );
    let out = p.kart(&["build", "--keep-temps"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kernels/tile/kernel.toml:3:11: entry `tiles<BM>` does not compile: identifier \"tiles\" is undefined")
            && err.contains("did you mean `tile`?"),
        "{err}"
    );
    // nvcc's output once; the other configs name the first; the summary groups them.
    assert_eq!(err.matches("┌─").count(), 1, "{err}");
    assert_eq!(err.matches("the same error as").count(), 2, "{err}");
    assert!(err.contains("in 3 artifacts: tile[BM=128] sm_90"), "{err}");
    // Each failing compile's folder is kept, with a script that runs nvcc again.
    let kept: Vec<std::path::PathBuf> = std::fs::read_dir(p.root().join("artifacts/kept"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    let unit = std::fs::read_to_string(kept[0].join("kart_instances.cu")).unwrap();
    assert!(unit.contains("&tiles<"), "{unit}");
    let again = std::process::Command::new("sh")
        .arg(kept[0].join("nvcc.sh"))
        .env("KART_TEST_NVCC_LOG", &p.nvcc_log)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("identifier \"tiles\" is undefined"),
        "{}",
        text(&again)
    );
    let gc = stdout(&p.ok(&["gc", "--all-unreferenced"]));
    assert!(
        gc.contains("removed 3 folder(s) of failed compiles"),
        "{gc}"
    );
    assert!(!p.root().join("artifacts/kept").exists());
}

#[test]
fn selections_that_match_nothing_say_which_value_or_rule() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "k",
        "out[0] = BM * BN;",
        "require = [\"BM * BN <= 8192\"]\n[params]\nBM = [64, 128]\nBN = [64, 128]\n",
    );
    let cases: [(&[&str], &str); 6] = [
        (
            &["build", "-p", "BM=48"],
            "k: BM=48 is not one of its values (64, 128)",
        ),
        (
            &["build", "-p", "BM=128", "-p", "BN=128"],
            "k: of the 1 combination(s) with BM=128,BN=128, require \"BM * BN <= 8192\" removes 1",
        ),
        (
            &["explain", "k", "-p", "BM=128", "-p", "BN=128"],
            "require \"BM * BN <= 8192\" removes 1",
        ),
        (&["build", "-p", "BX=1"], "did you mean `BM`?"),
        (&["build", "kk"], "did you mean `k`?"),
        (
            &["explain", "k", "-p", "BM=64", "-p", "BNN=64"],
            "unknown: BNN (did you mean `BN`?)",
        ),
    ];
    for (args, want) in cases {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", text(&out));
    }
    // --explain-grid narrows to the -p values.
    let grid = stdout(&p.ok(&["build", "--explain-grid", "--json", "-p", "BM=128"]));
    let report: serde_json::Value = serde_json::from_str(&grid).unwrap();
    assert_eq!(report[0]["raw"], 2, "{grid}");
    assert_eq!(report[0]["kept"], 1, "{grid}");
    // `ls` says which values the lock has.
    p.ok(&["build"]);
    let out = p.kart(&["ls", "-p", "BM=48"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("values in kart.lock: BM: 64, 128"),
        "{}",
        text(&out)
    );
    // A project with no kernel says so, not that -p matched nothing.
    let empty = TestProject::new(&["sm_90"]);
    let out = empty.kart(&["build"]);
    assert!(
        stderr(&out).contains("the project has no kernels yet"),
        "{}",
        text(&out)
    );
}

#[test]
fn completions_offer_the_projects_kernels_and_params_and_no_hidden_command() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("scale", "out[0] = BLOCK;", "[params]\nBLOCK = [128, 256]\n");
    // fish's protocol: the words typed so far, the last one being completed.
    let complete = |words: &[&str]| {
        let mut args = vec!["--", "kart"];
        args.extend(words);
        stdout(&p.kart_env(&args, &[("KART_COMPLETE", "fish")]))
    };
    let commands = complete(&[""]);
    assert!(
        commands.contains("build\t") && commands.contains("ls\t"),
        "{commands}"
    );
    assert!(!commands.contains("attest-worker"), "{commands}");
    assert!(complete(&["build", ""]).contains("scale\tkernels/scale"));
    assert!(complete(&["ls", "-p", "BL"]).contains("BLOCK=256\tscale"));
    let script = stdout(&p.ok(&["completions", "bash"]));
    assert!(script.contains("KART_COMPLETE"), "{script}");
}

#[test]
fn doctor_counts_the_locks_missing_blobs_and_says_what_to_run() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel("k", "out[0] = 1.0f;", "");
    p.ok(&["build"]);
    let out = stdout(&p.ok(&["doctor"]));
    assert!(
        out.contains("kart.lock: 2 artifacts, 2 of their blobs in the store\n"),
        "{out}"
    );
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = stdout(&p.ok(&["doctor"]));
    assert!(
        out.contains("kart.lock: 2 artifacts, 0 of their blobs in the store (2 missing)")
            && out.contains("next: kart build: compiles the 2 missing artifact(s)"),
        "{out}"
    );
}

/// `kart export` of kernels that have several configs and no `default` names every such
/// kernel in one error, not the first one only.
#[test]
fn export_names_every_kernel_without_a_default_at_once() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("first", "out[0] = V;", "[params]\nV = [1, 2]\n");
    p.kernel("second", "out[0] = W;", "[params]\nW = [3, 4]\n");
    p.ok(&["build"]);
    let out = p.kart(&["export", "--python", "-o", "k.py"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`first` (2 configs)") && err.contains("`second` (2 configs)"),
        "{err}"
    );
    assert!(!p.root().join("k.py").exists());
}
