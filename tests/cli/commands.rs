//! The commands around the build: `init`, `export`, `completions`, `doctor`, `ls`,
//! `tune`, and color on a terminal.

use crate::harness::{TestProject, stderr, stdout, text};
use crate::{GRID, GRID_BODY, grid_project};

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
            .env("KART_NVCC", crate::harness::real_nvcc())
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
    let repo = std::fs::read_to_string(crate::harness::repo_root().join("kart.lock")).unwrap();
    let made = std::fs::read_to_string(dir.join("kart.lock")).unwrap();
    assert_eq!(digests(&made).len(), 2, "{made}");
    assert_eq!(digests(&made), digests(&repo));
}

/// A module of 200 configs reads its data on first use: importing it reads no record,
/// load() one config's records and no cubin, and a corrupted cubin fails only its own
/// decode (tests/python/check_export_lazy.py).
#[test]
fn an_exported_module_of_hundreds_of_configs_imports_without_reading_its_cubins() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/tiny/tiny.cu",
        "template <int A, int B>\n__global__ void tiny(int* out) { out[threadIdx.x] = A * 1000 + B; }\n",
    );
    let values = |n: i64| (0..n).map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    p.write(
        "kernels/tiny/kernel.toml",
        &format!(
            "name = \"tiny\"\nsources = [\"tiny.cu\"]\nentry = [\"tiny<A, B>\"]\n[params]\nA = [{}]\nB = [{}]\n",
            values(10),
            values(20)
        ),
    );
    p.ok(&["build"]);
    let module = p.root().join("tiny_kernels.py");
    let out = p.ok(&[
        "export",
        "--python",
        "--all-configs",
        "-o",
        module.to_str().unwrap(),
        "tiny",
    ]);
    assert!(stderr(&out).contains("200 cubins"), "{}", text(&out));
    let repo = crate::harness::repo_root();
    let check = std::process::Command::new("python3")
        .arg(repo.join("tests/python/check_export_lazy.py"))
        .arg(&module)
        .args(["tiny", "A=3", "B=7"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        stdout(&check).contains("all checks passed"),
        "{}",
        text(&check)
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
    let repo = crate::harness::repo_root();
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
        crate::harness::skip(
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

/// `kart ls --json` writes its rows as it reads the lock: the rows are the lock's
/// records, the bytes those of the general reader (the same lock in a layout only it
/// reads), and a bad record late in the lock prints nothing but the error.
#[test]
fn ls_json_rows_are_the_lock_s_and_a_bad_record_late_prints_nothing() {
    let p = grid_project();
    p.kernel("other", "out[0] = 1.0f;", "");
    p.ok(&["build"]);
    let lock_text = p.read("kart.lock");
    let lock =
        kart::store::lockfile::Lockfile::parse(&lock_text, std::path::Path::new("kart.lock"))
            .unwrap();
    let all = stdout(&p.ok(&["ls", "--json"]));
    let rows: serde_json::Value = serde_json::from_str(&all).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), lock.artifacts.len());
    for (row, a) in rows.iter().zip(&lock.artifacts) {
        assert_eq!(row["kernel"], a.kernel.as_str());
        assert_eq!(row["config"], serde_json::to_value(&a.config).unwrap());
        assert_eq!(row["target"], a.target.as_str());
        assert_eq!(row["digest"], a.digest.as_str());
        assert_eq!(row["size"], a.size);
        let registers = a.entries.iter().map(|e| e.registers).max().unwrap();
        assert_eq!(row["registers"], registers);
        assert_eq!(row["local"], true, "{row}");
    }
    // The same lock with a comment after a value: only the general reader takes it.
    let one = stdout(&p.ok(&["ls", "grid", "-p", "A=2", "--json"]));
    let commented =
        lock_text.replacen("\nkind = \"cubin\"\n", "\nkind = \"cubin\" # as built\n", 1);
    assert_ne!(commented, lock_text);
    p.write("kart.lock", &commented);
    assert_eq!(stdout(&p.ok(&["ls", "--json"])), all);
    assert_eq!(stdout(&p.ok(&["ls", "grid", "-p", "A=2", "--json"])), one);
    // The last record's digest broken: no row at all, the error at its header's line.
    let last = lock.artifacts.last().unwrap();
    p.write(
        "kart.lock",
        &lock_text.replacen(&last.digest, "not-a-digest", 1),
    );
    let line = lock_text[..lock_text.rfind("[[artifact]]").unwrap()]
        .lines()
        .count()
        + 1;
    let out = p.kart(&["ls", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("kart.lock:{line}:"))
            && stderr(&out).contains("64 lower-case hex"),
        "{}",
        text(&out)
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
