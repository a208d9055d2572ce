//! Launch-only params: params that change only the launch share one compile per
//! distinct compile input, and the lock still answers every config.

use crate::harness::{TestProject, lock_digests, stderr, stdout, text};

const FILL: &str = r#"
extern "C" __global__ void fill_block(float *out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = (float)blockDim.x;
}
"#;

fn fill_project(extra: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/fill_block/fill_block.cu", FILL);
    p.write(
        "kernels/fill_block/kernel.toml",
        &format!(
            r#"name = "fill_block"
sources = ["fill_block.cu"]
entry = ["fill_block"]
launch_params = ["THREADS"]
{extra}
[params]
THREADS = [64, 128, 256]

[launch]
grid = ["cdiv(N, THREADS)"]
block = ["THREADS"]
problem = ["N"]
"#
        ),
    );
    p
}

#[test]
fn launch_only_params_share_one_compile_and_the_lock_answers_every_config() {
    let p = fill_project("");
    let out = p.ok(&["build"]);
    let err = stderr(&out);
    assert!(err.contains("3 artifacts selected, 1 to compile"), "{err}");
    assert!(
        err.contains("1 compiled, 2 sharing one of those compiles (launch-only params)"),
        "{err}"
    );
    assert_eq!(p.compiles(), 1);
    // No -DTHREADS: the value reaches only the launch.
    assert!(
        !p.compile_lines()[0].contains("THREADS"),
        "{:?}",
        p.compile_lines()
    );
    let digests = lock_digests(&p);
    assert_eq!(digests.len(), 3, "{}", p.read("kart.lock"));
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    let mut paths = Vec::new();
    for threads in ["64", "128", "256"] {
        let out = p.ok(&[
            "path",
            "fill_block",
            "-p",
            &format!("THREADS={threads}"),
            "--target",
            "sm_90",
        ]);
        paths.push(stdout(&out).trim().to_string());
    }
    assert!(paths[0].ends_with(".cubin"), "{paths:?}");
    assert!(paths.iter().all(|x| *x == paths[0]), "{paths:?}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3, "{json}");
    p.ok(&["build", "--locked"]);
    // A second build takes all three from the store.
    p.clear_log();
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("3 artifacts: 0 compiled, 3 from the store"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
}

#[test]
fn a_launch_only_param_that_reaches_the_compile_is_refused() {
    // Mentioned by the source: it would be a -D macro.
    let p = fill_project("");
    p.write(
        "kernels/fill_block/fill_block.cu",
        &FILL.replace("(float)blockDim.x", "(float)THREADS"),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains(
            "kernel.toml:4:18: launch-only param `THREADS` is mentioned by the kernel's sources"
        ),
        "{}",
        text(&out)
    );
    // Used by a derived param, whose value reaches the compile.
    let p = fill_project("[derived]\nWARPS = \"THREADS / 32\"\n");
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("is used by the derived param `WARPS`"),
        "{}",
        text(&out)
    );
    // Not a param at all.
    let p = fill_project("");
    let toml = p.read("kernels/fill_block/kernel.toml");
    p.write(
        "kernels/fill_block/kernel.toml",
        &toml.replace(
            "launch_params = [\"THREADS\"]",
            "launch_params = [\"THREAD\"]",
        ),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("launch-only param `THREAD` is not a param"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
}

#[test]
fn a_param_that_reaches_no_compile_input_is_found_launch_only_without_being_declared() {
    let p = fill_project("");
    let toml = p.read("kernels/fill_block/kernel.toml");
    p.write(
        "kernels/fill_block/kernel.toml",
        &toml.replace("launch_params = [\"THREADS\"]\n", ""),
    );
    let out = p.ok(&["build"]);
    let err = stderr(&out);
    assert_eq!(
        err.matches(
            "note: fill_block: THREADS reaches no compile input; configs that differ only in it share one compile"
        )
        .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains(
            "3 artifacts: 1 compiled, 2 sharing one of those compiles (launch-only params)"
        ),
        "{err}"
    );
    assert_eq!(p.compiles(), 1);
    let digests = lock_digests(&p);
    assert_eq!(digests.len(), 3, "{}", p.read("kart.lock"));
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    let mut paths = Vec::new();
    for threads in ["64", "128", "256"] {
        let out = p.ok(&[
            "path",
            "fill_block",
            "-p",
            &format!("THREADS={threads}"),
            "--target",
            "sm_90",
        ]);
        paths.push(stdout(&out).trim().to_string());
    }
    assert!(paths[0].ends_with(".cubin"), "{paths:?}");
    assert!(paths.iter().all(|x| *x == paths[0]), "{paths:?}");
    p.ok(&["build", "--locked"]);
    // Declared, it is the same compile (the same key): nothing to compile, no note.
    p.clear_log();
    p.write("kernels/fill_block/kernel.toml", &toml);
    let out = p.ok(&["build"]);
    assert!(
        !stderr(&out).contains("reaches no compile input"),
        "{}",
        text(&out)
    );
    assert!(
        stderr(&out).contains("kart.lock unchanged"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
    // Once the source names it, it is a -D macro: one compile per value.
    p.write(
        "kernels/fill_block/kernel.toml",
        &toml.replace("launch_params = [\"THREADS\"]\n", ""),
    );
    p.write(
        "kernels/fill_block/fill_block.cu",
        &FILL.replace("(float)blockDim.x", "(float)THREADS"),
    );
    let out = p.ok(&["build"]);
    assert!(
        !stderr(&out).contains("reaches no compile input"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 3);
    let digests = lock_digests(&p);
    assert_eq!(digests.len(), 3);
    assert!(
        digests[0] != digests[1] && digests[1] != digests[2],
        "{digests:?}"
    );
}

#[test]
fn a_no_op_build_of_configs_sharing_one_compile_is_settled() {
    let p = fill_project("");
    p.ok(&["build"]);
    // Once the store's folders are older than the clock's granularity, a no-op build
    // finds every record (three per key) in agreement and records the settled state.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    p.ok(&["build"]);
    let settled = std::fs::read_dir(p.root().join("artifacts/v1/settled"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(settled, 1, "no settled record after a no-op build");
    p.ok(&["build", "--locked"]);
}
