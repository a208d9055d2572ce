//! kart for a project of one's own, with nothing of kart's repository: `kart init` in a
//! temporary folder, `kart toolchain install` of the pinned nvcc, a toolkit component
//! (cuRAND) and a header library (CUTLASS) from PyPI into kart's home, then build,
//! `--locked`, export and doctor. Real downloads: every test that installs shares one
//! home under cargo's target folder, which kart locks while installing, so a second
//! run (or another test binary) downloads nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::{stderr, stdout, text};

/// The home shared by the tests that install (kept between runs).
fn shared_home() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kart-home")
}

fn kart(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(args)
        .current_dir(dir)
        .env("KART_HOME", home)
        .env_remove("KART_NVCC")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env_remove("KART_REMOTE")
        // No nvcc from the machine: only the one kart installs.
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("the kart binary runs")
}

fn ok(dir: &Path, home: &Path, args: &[&str]) -> Output {
    let out = kart(dir, home, args);
    assert!(out.status.success(), "kart {args:?}\n{}", text(&out));
    out
}

const KERNEL_CU: &str = r#"#include <curand_kernel.h>
#include <cutlass/numeric_types.h>

template <int N>
__global__ void noise(float* out, unsigned long long seed) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, threadIdx.x, 0, &state);
  cutlass::half_t h(curand_uniform(&state));
  out[threadIdx.x] = float(h) * N;
}
"#;

const KERNEL_TOML: &str = r#"name = "noise"
sources = ["noise.cu"]
entry = ["noise<N>"]
libraries = ["cutlass"]
targets = ["sm_90"]
default = { N = 2 }

[params]
N = [1, 2]
"#;

#[test]
fn a_project_of_ones_own_installs_its_toolchain_and_builds() {
    let home = shared_home();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("server");
    let out = ok(tmp.path(), &home, &["init", "server"]);
    assert!(stderr(&out).contains("created kart.toml"), "{}", text(&out));
    // A second init changes nothing, and says so.
    let again = ok(&dir, &home, &["init"]);
    assert!(
        stderr(&again).contains("nothing changed"),
        "{}",
        text(&again)
    );

    let toml = std::fs::read_to_string(dir.join("kart.toml")).unwrap();
    let toml = toml.replace(
        "nvcc = \"13.0\"",
        "nvcc = \"13.0\"\ncomponents = [\"nvidia-curand==10.4.0.35\"]",
    ) + "\n[library.cutlass]\npip = \"nvidia-cutlass==4.2.0.0\"\ninclude = \"cutlass_library/source/include\"\nsha256 = \"f305d9da4498a22258c8dc946ef4f85c41c2b81839ece104582f8b3a78baeaca\"\n";
    std::fs::write(dir.join("kart.toml"), toml).unwrap();
    std::fs::create_dir_all(dir.join("kernels/noise")).unwrap();
    std::fs::write(dir.join("kernels/noise/noise.cu"), KERNEL_CU).unwrap();
    std::fs::write(dir.join("kernels/noise/kernel.toml"), KERNEL_TOML).unwrap();

    // Before the install the build says what to run.
    let before = kart(&dir, &tmp.path().join("empty-home"), &["build"]);
    assert_eq!(before.status.code(), Some(3), "{}", text(&before));
    assert!(
        stderr(&before).contains("kart toolchain install"),
        "{}",
        text(&before)
    );

    ok(&dir, &home, &["toolchain", "install"]);
    // Installed once: a second install only checks.
    let again = ok(&dir, &home, &["toolchain", "install"]);
    assert!(
        stderr(&again).contains("already installed"),
        "{}",
        text(&again)
    );
    assert!(!stderr(&again).contains("downloading"), "{}", text(&again));
    let nvcc = stdout(&ok(&dir, &home, &["toolchain", "path", "nvcc"]));
    assert!(nvcc.trim().starts_with(home.to_str().unwrap()), "{nvcc}");
    let list = stdout(&ok(&dir, &home, &["toolchain", "list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with('*') && l.contains("toolchain") && l.contains("13.0"))
            && list
                .lines()
                .any(|l| l.starts_with('*') && l.contains("cutlass")),
        "{list}"
    );

    let built = ok(&dir, &home, &["build"]);
    assert!(stderr(&built).contains("4 artifacts"), "{}", text(&built));
    ok(&dir, &home, &["build", "--locked"]);
    ok(
        &dir,
        &home,
        &["export", "noise", "smoke", "--python", "-o", "kernels.py"],
    );
    let module = std::fs::read_to_string(dir.join("kernels.py")).unwrap();
    assert!(module.contains("\"noise\"") && module.contains("\"smoke\""));
    // doctor: the toolchain it found, and (on a machine without a GPU) that it has none.
    let doctor = kart(&dir, &home, &["doctor"]);
    let said = format!("{}{}", stdout(&doctor), stderr(&doctor));
    assert!(said.contains("13.0.88"), "{said}");
}
