//! nvcc under kart's control: a hung compile killed with its children, environment
//! overrides refused, the pinned release enforced, a missing nvcc named.

use std::time::{Duration, Instant};

use crate::grid_project;
use crate::harness::{TestProject, stderr, text};

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
    // Long enough for the good config's real compile on a loaded machine (two seconds
    // were not, under a parallel test run beside other builds), short beside the hang.
    let out = p.kart_env(
        &["build", "--timeout", "15"],
        &[("KART_TEST_PIDS", pids.to_str().unwrap())],
    );
    let elapsed = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("k[MODE=hang] sm_90: nvcc timed out after 15 s"),
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
