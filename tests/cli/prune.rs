//! `[prune]`: configs whose compiled artifacts exceed a bound on what ptxas reports
//! (spills, registers, shared memory, stack) leave the lock whole, are recorded as
//! pruned, and are never compiled again to decide.

use crate::harness::{TestProject, stderr, stdout, text};

/// `N` values live at once under a 32-register cap (`__launch_bounds__(1024, 2)`):
/// ptxas keeps N = 2 and 4 in registers and spills N = 64 on sm_80 and sm_90.
const LIVE: &str = r#"
extern "C" __global__ void __launch_bounds__(1024, 2) live(const float* x, float* y) {
    float acc[N];
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = x[threadIdx.x + i * 1024];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i + 7) % N] + x[i];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) s += acc[i] * (float)(i + 1);
    y[threadIdx.x] = s;
}
"#;

const TOML: &str = r#"name = "live"
sources = ["live.cu"]
entry = ["live"]
flags = ["-O3"]

[params]
N = [2, 4, 64]
"#;

const PRUNE: &str = "\n[prune]\nmax_spill_bytes = 0\n";

fn live_project(prune: &str) -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.write("kernels/live/live.cu", LIVE);
    p.write("kernels/live/kernel.toml", &format!("{TOML}{prune}"));
    p
}

/// The configs `kart ls --json` lists, as `N=…` strings.
fn listed(p: &TestProject) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    let mut out: Vec<String> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("N={}/{}", a["config"]["N"], a["target"].as_str().unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn a_config_that_spills_leaves_the_lock_and_comes_back_without_a_compile() {
    let p = live_project(PRUNE);
    let out = p.ok(&["build"]);
    let err = stderr(&out);
    assert!(
        err.contains("live: 1 config(s) pruned by [prune] max_spill_bytes = 0 (")
            && err.contains("bytes of spills on sm_")
            && err.contains(" in N=64)"),
        "{err}"
    );
    assert!(
        err.contains("6 artifacts: 6 compiled, 0 from the store, 2 pruned by [prune]"),
        "{err}"
    );
    assert!(err.contains("kart.lock updated (4 artifacts)"), "{err}");
    assert_eq!(p.compiles(), 6);
    assert_eq!(
        listed(&p),
        ["N=2/sm_80", "N=2/sm_90", "N=4/sm_80", "N=4/sm_90"]
    );
    let lock = p.read("kart.lock");
    assert!(lock.contains("version = 4"), "{lock}");
    assert_eq!(lock.matches("[[pruned]]").count(), 2, "{lock}");
    p.ok(&["build", "--locked"]);

    // Nothing changed: nothing compiled, the same lock.
    p.clear_log();
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("kart.lock unchanged"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
    assert_eq!(p.read("kart.lock"), lock);

    // gc keeps the pruned blobs. Without the bound the lock no longer agrees; a
    // build brings the config back from the store, compiling nothing.
    p.ok(&["gc"]);
    p.write("kernels/live/kernel.toml", TOML);
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out)
            .contains("live[N=64]: kart.lock leaves it out as pruned, but [prune] keeps it"),
        "{}",
        text(&out)
    );
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("6 artifacts: 0 compiled, 6 from the store"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
    assert_eq!(listed(&p).len(), 6);
    let unpruned = p.read("kart.lock");
    assert!(unpruned.contains("version = 3") && !unpruned.contains("[[pruned]]"));

    // The bound back: a lock that lists the spilling config disagrees with it.
    p.write("kernels/live/kernel.toml", &format!("{TOML}{PRUNE}"));
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("live[N=64]: [prune] leaves it out (")
            && err.contains("over max_spill_bytes = 0), but kart.lock lists it"),
        "{err}"
    );
    p.ok(&["build"]);
    assert_eq!(p.read("kart.lock"), lock);
    assert_eq!(p.compiles(), 0);

    // A fresh clone (no store): --locked checks the decision from the lock's numbers,
    // and a build compiles only the configs it keeps.
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    p.ok(&["build", "--locked"]);
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("6 artifacts: 4 compiled, 2 from the store, 2 pruned by [prune]"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 4);
    assert_eq!(p.read("kart.lock"), lock);
}

#[test]
fn a_malformed_prune_table_is_refused_where_it_is_written() {
    let cases: &[(&str, &str)] = &[
        (
            "max_spills = 0",
            "kernel.toml:10:1: unknown key `max_spills`",
        ),
        (
            "max_spills = 0",
            "keys here: max_spill_bytes, max_registers, max_shared_bytes, max_stack_bytes",
        ),
        (
            "max_registers = -1",
            "kernel.toml:10:17: `max_registers = -1` is negative",
        ),
        (
            "max_shared_bytes = \"48K\"",
            "kernel.toml:10:20: invalid type: string",
        ),
        (
            "max_stack_bytes = 1.5",
            "kernel.toml:10:19: invalid type: floating point",
        ),
    ];
    for (line, message) in cases {
        let p = live_project(&format!("\n[prune]\n{line}\n"));
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{line}: {}", text(&out));
        assert!(stderr(&out).contains(message), "{line}: {}", text(&out));
        assert_eq!(p.compiles(), 0);
    }
    // The bounds are shown by --explain-grid, which compiles nothing.
    let p = live_project("\n[prune]\nmax_spill_bytes = 0\nmax_registers = 255\n");
    let out = p.ok(&["build", "--explain-grid"]);
    assert!(
        stdout(&out)
            .contains("[prune] max_spill_bytes = 0, max_registers = 255: applied after compile"),
        "{}",
        text(&out)
    );
}
