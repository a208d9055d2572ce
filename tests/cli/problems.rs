//! Problem-driven builds: a shape-specialized template kernel whose `N` is bound to a
//! problem key takes its values from a problems file or a trace, with the grid's rules
//! applied; without problems it builds nothing and says what to pass.

use crate::harness::{TestProject, stderr, stdout, text};

const SCALE_N: &str = r#"
template <int N>
__global__ void scale_n(float *x) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
    x[i] *= 2.0f;
}
"#;

/// `scale_n<N>` with `N` bound to the problem key `N`, and a rule that drops sizes that
/// are not a multiple of 1024.
fn shape_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/scale_n/scale_n.cu", SCALE_N);
    p.write(
        "kernels/scale_n/kernel.toml",
        r#"name = "scale_n"
sources = ["scale_n.cu"]
entry = ["scale_n<N>"]
require = ["N % 1024 == 0"]

[problem_params]
N = "N"
"#,
    );
    p
}

fn problems(sizes: &[i64]) -> String {
    sizes
        .iter()
        .map(|n| format!("[[problem]]\nkernel = \"scale_n\"\nN = {n}\n\n"))
        .collect()
}

/// The configs of `kart ls --json`, as `N` values, sorted.
fn locked_sizes(p: &TestProject) -> Vec<i64> {
    let json: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    let mut sizes: Vec<i64> = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kernel"] == "scale_n")
        .map(|a| a["config"]["N"].as_i64().unwrap())
        .collect();
    sizes.sort();
    sizes
}

#[test]
fn a_problems_file_and_a_trace_choose_the_configs_of_a_shape_specialized_kernel() {
    let p = shape_project();
    p.write("problems.toml", &problems(&[4096, 1000, 2048, 4096]));
    let out = p.ok(&["build", "--problems", "problems.toml"]);
    // 1000 is a problem's value the require rule drops; 4096 is listed twice.
    assert!(
        stderr(&out)
            .contains("3 problem value(s) from problems.toml (N=1000 N=2048 N=4096), 2 config(s)"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 2);
    assert_eq!(locked_sizes(&p), [2048, 4096]);
    let path = stdout(&p.ok(&["path", "scale_n", "-p", "N=2048", "--target", "sm_90"]));
    assert!(path.trim().ends_with(".cubin"), "{path}");
    // The same file checks the same set.
    p.ok(&["build", "--locked", "--problems", "problems.toml"]);
    // Another file is another set: --locked names what differs.
    p.write("more.toml", &problems(&[2048, 4096, 8192]));
    let out = p.kart(&["build", "--locked", "--problems", "more.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("scale_n[N=8192]"), "{}", text(&out));

    // `coverage` says which problems no artifact serves.
    p.write(
        "fleet.toml",
        "[[fleet]]\nname = \"NVIDIA H100 80GB HBM3\"\ncapability = \"9.0\"\n",
    );
    let out = p.ok(&[
        "coverage",
        "--fleet",
        "fleet.toml",
        "--problems",
        "more.toml",
    ]);
    let report = stdout(&out);
    assert!(report.contains("problems with no artifact"), "{report}");
    assert!(
        report.contains("scale_n on H100 80GB HBM3 (9.0): N=8192"),
        "{report}"
    );
    assert!(!report.contains("N=4096\n"), "{report}");
    let out = p.kart(&[
        "coverage",
        "--fleet",
        "fleet.toml",
        "--problems",
        "more.toml",
        "--require",
        "cubin",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    // A trace of the workload (what the runtime writes for each launch that named a
    // problem, format: kart_runtime::trace) drives the build of a fresh checkout.
    let lock: toml::Value = toml::from_str(&p.read("kart.lock")).unwrap();
    let mut trace = String::new();
    for a in lock["artifact"].as_array().unwrap() {
        let n = a["config"]["N"].as_integer().unwrap();
        let record = serde_json::json!({
            "event": "launch", "kernel": "scale_n", "config": {"N": n},
            "target": "sm_90", "digest": a["digest"].as_str().unwrap(),
            "problem": {"N": n}, "gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0",
        });
        trace.push_str(&format!("{record}\n"));
    }
    p.write("trace.jsonl", &trace);
    let out = p.ok(&[
        "coverage",
        "--fleet",
        "fleet.toml",
        "--trace",
        "trace.jsonl",
    ]);
    assert!(
        !stdout(&out).contains("problems with no artifact"),
        "{}",
        text(&out)
    );
    std::fs::remove_file(p.root().join("kart.lock")).unwrap();
    p.ok(&["build", "--trace", "trace.jsonl"]);
    assert_eq!(locked_sizes(&p), [2048, 4096]);
    // A trace and a problems file together: the union of their problems.
    p.clear_log();
    p.ok(&["build", "--trace", "trace.jsonl", "--problems", "more.toml"]);
    assert_eq!(locked_sizes(&p), [2048, 4096, 8192]);
    assert_eq!(p.compiles(), 1);
}

#[test]
fn without_problems_a_problem_driven_kernel_builds_nothing_and_says_what_to_pass() {
    let p = shape_project();
    // Alone, nothing to build: an error, so that CI does not pass having checked nothing.
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("note: kernel `scale_n` builds nothing").count(),
        1,
        "{err}"
    );
    assert!(err.contains("--problems FILE"), "{err}");
    assert!(err.contains("N take(s) the values of problems"), "{err}");
    // Beside another kernel: that one builds, and the note says why scale_n did not.
    p.kernel("plain", "out[0] = 1.0f;", "");
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("its [problem_params] (N = \"N\") take their values from problems"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 1);
    // Once the lock holds problem configs, a build without problems would drop them.
    p.write("problems.toml", &problems(&[2048]));
    p.ok(&["build", "--problems", "problems.toml"]);
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("kart.lock has 1 artifact(s) of `scale_n`, built for problems"),
        "{}",
        text(&out)
    );
    // --locked without them names the configs it cannot check.
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("scale_n[N=2048]"), "{}", text(&out));
    // An empty problems file drops them, on purpose.
    p.write("none.toml", "");
    p.ok(&["build", "--problems", "none.toml"]);
    assert_eq!(locked_sizes(&p), Vec::<i64>::new());
}

#[test]
fn malformed_problem_files_are_refused_with_the_file_and_line() {
    let p = shape_project();
    let cases: &[(&str, &str, &str)] = &[
        (
            "text.toml",
            "[[problem]]\nkernel = \"scale_n\"\nN = \"big\"\n",
            "text.toml:3:",
        ),
        (
            "syntax.toml",
            "[[problem]\nkernel = \"scale_n\"\n",
            "syntax.toml:1:",
        ),
        (
            "nokernel.toml",
            "[[problem]]\nN = 4096\n",
            "without `kernel`",
        ),
        (
            "nokey.toml",
            "[[problem]]\nkernel = \"scale_n\"\nM = 4096\n",
            "has no key `N`, which `kernels/scale_n/kernel.toml` binds `N` to",
        ),
    ];
    for (name, body, expected) in cases {
        p.write(name, body);
        let out = p.kart(&["build", "--problems", name]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        assert!(stderr(&out).contains(expected), "{name}: {}", text(&out));
    }
    p.write("trace.jsonl", "{\"event\": \"launch\", \"kernel\": 3}\n");
    let out = p.kart(&["build", "--trace", "trace.jsonl"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("trace.jsonl:1:"), "{}", text(&out));
    p.write("nothing.jsonl", "");
    let out = p.kart(&["build", "--trace", "nothing.jsonl"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("has no record"), "{}", text(&out));
    // kernel.toml: a problem param also listed in [params], and a bad problem key.
    p.write(
        "kernels/scale_n/kernel.toml",
        "name = \"scale_n\"\nsources = [\"scale_n.cu\"]\nentry = [\"scale_n<N>\"]\n\n[params]\nN = [1024]\n\n[problem_params]\nN = \"N\"\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("kernel.toml:9:1: `N` is in both `[params]` and `[problem_params]`"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);
}
