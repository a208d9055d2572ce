//! Headers from outside the project: header libraries pinned in kart.toml and toolkit
//! components installed beside the pinned nvcc (the repository's `scripts/setup`
//! installs the ones its kart.toml declares, which these tests use).

use crate::harness::{TestProject, stderr, stdout};

const USER_CU: &str = r#"
#include <mylib/scale.h>
extern "C" __global__ void user(float *out) { out[threadIdx.x] = mylib_scale(threadIdx.x) * X; }
"#;

const OTHER_CU: &str = r#"
extern "C" __global__ void other(float *out) { out[threadIdx.x] = 1.0f; }
"#;

/// A project whose `[library.mylib]` is a pip-style install under `.toolchain/lib`
/// (written by hand here: kart only reads the folder), used by one of two kernels.
fn library_project(pin: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        ".toolchain/lib/mylib/pkg/include/mylib/scale.h",
        "__device__ inline float mylib_scale(int i) { return 2.0f * i; }\n",
    );
    for n in 0..200 {
        p.write(
            &format!(".toolchain/lib/mylib/pkg/include/mylib/extra/h{n}.h"),
            &format!("// header {n}\n"),
        );
    }
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!("{toml}\n[library.mylib]\npip = \"mylib==1.0\"\ninclude = \"pkg/include\"\n{pin}"),
    );
    p.write("kernels/user/user.cu", USER_CU);
    p.write(
        "kernels/user/kernel.toml",
        "name = \"user\"\nsources = [\"user.cu\"]\nentry = [\"user\"]\nlibraries = [\"mylib\"]\n[params]\nX = [1, 2]\n",
    );
    p.write("kernels/other/other.cu", OTHER_CU);
    p.write(
        "kernels/other/kernel.toml",
        "name = \"other\"\nsources = [\"other.cu\"]\nentry = [\"other\"]\n",
    );
    p
}

/// The content hash kart reports for the library (it refuses a build without one).
fn content_hash(p: &TestProject) -> String {
    let err = stderr(&p.kart(&["build"]));
    let at = err
        .find("sha256 = \"")
        .unwrap_or_else(|| panic!("no hash suggested:\n{err}"));
    err[at + 10..at + 74].to_string()
}

#[test]
fn a_header_library_is_pinned_by_content_and_rebuilds_only_its_users() {
    let p = library_project("");
    // Pinned by version only: refused, with the line to add.
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pinned by version only"),
        "{}",
        stderr(&out)
    );
    let hash = content_hash(&p);
    let toml = p.read("kart.toml");
    p.write("kart.toml", &format!("{toml}sha256 = \"{hash}\"\n"));
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 3);
    for line in p.compile_lines() {
        let has = line.contains("-isystem .toolchain/lib/mylib/pkg/include");
        assert_eq!(
            has,
            line.contains("user.cu") || line.contains("/user/"),
            "{line}"
        );
    }
    let explain = stdout(&p.ok(&["explain", "user", "-p", "X=1"]));
    assert!(
        explain.contains(&format!("library mylib: mylib==1.0 sha256:{hash}")),
        "{explain}"
    );

    // A no-op build compiles nothing and reads no header (the stamp cache).
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);

    // A new version of the package, same content: exactly the user's configs rebuild.
    let toml = p.read("kart.toml");
    p.write("kart.toml", &toml.replace("mylib==1.0", "mylib==1.1"));
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 2);
    assert!(p.compile_lines().iter().all(|l| !l.contains("other")));

    // An edited header no longer matches the pin: refused, naming both hashes.
    p.write(
        ".toolchain/lib/mylib/pkg/include/mylib/scale.h",
        "__device__ inline float mylib_scale(int i) { return 3.0f * i; }\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("has content sha256") && err.contains(&format!("kart.toml pins {hash}")),
        "{err}"
    );
    // Needed only by the kernels that list it: the other kernel still builds and
    // checks, and the error names the kernel that lists the library.
    p.ok(&["build", "other"]);
    p.ok(&["build", "--locked", "other"]);
    let err = stderr(&p.kart(&["build", "user"]));
    assert!(
        err.contains("kernel `user` cannot build: header library `mylib`"),
        "{err}"
    );
}

#[test]
fn a_library_header_included_without_declaring_the_library_names_it() {
    let p = library_project("");
    let hash = content_hash(&p);
    let toml = p.read("kart.toml");
    p.write("kart.toml", &format!("{toml}sha256 = \"{hash}\"\n"));
    // `other` includes the header through a relative path, without listing the library.
    p.write(
        "kernels/other/other.cu",
        &format!(
            "#include \"../../.toolchain/lib/mylib/pkg/include/mylib/scale.h\"\n{}",
            OTHER_CU
        ),
    );
    let out = p.kart(&["build", "other"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("header library `mylib`") && err.contains("libraries = [\"mylib\"]"),
        "{err}"
    );
    // A kernel naming a library kart.toml does not declare: file, line, column.
    p.write(
        "kernels/other/kernel.toml",
        "name = \"other\"\nsources = [\"other.cu\"]\nentry = [\"other\"]\nlibraries = [\"cutlas\"]\n",
    );
    let err = stderr(&p.kart(&["build"]));
    assert!(
        err.contains("kernel.toml:4:") && err.contains("library `cutlas` is not declared"),
        "{err}"
    );
}

#[test]
fn a_toolkit_component_is_found_checked_and_in_the_key() {
    let p = TestProject::new(&["sm_90"]);
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &toml.replace(
            "nvcc = \"13.0\"\n",
            "nvcc = \"13.0\"\ncomponents = [\"nvidia-curand==10.4.0.35\"]\n",
        ),
    );
    // cuRAND's device API: not in the nvcc wheels, installed beside them by setup.
    p.write(
        "kernels/rng/rng.cu",
        r#"#include <curand_kernel.h>
extern "C" __global__ void rng(float *out, unsigned long long seed) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, threadIdx.x, 0, &state);
  out[threadIdx.x] = curand_uniform(&state);
}
"#,
    );
    p.write(
        "kernels/rng/kernel.toml",
        "name = \"rng\"\nsources = [\"rng.cu\"]\nentry = [\"rng\"]\n",
    );
    p.ok(&["build"]);
    let explain = stdout(&p.ok(&["explain", "rng"]));
    assert!(
        explain.contains("toolchain: components: nvidia-curand==10.4.0.35"),
        "{explain}"
    );
    // A component that is not installed: refused before any compile, saying what to run.
    p.write(
        "kart.toml",
        &toml.replace(
            "nvcc = \"13.0\"\n",
            "nvcc = \"13.0\"\ncomponents = [\"nvidia-curand==10.4.0.35\", \"nvidia-cufft==12.0.0.15\"]\n",
        ),
    );
    p.clear_log();
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("`nvidia-cufft==12.0.0.15`, which is not installed beside nvcc")
            && err.contains("kart toolchain install"),
        "{err}"
    );
    assert_eq!(p.compiles(), 0);
    // Not pinned: refused at the line.
    p.write(
        "kart.toml",
        &toml.replace(
            "nvcc = \"13.0\"\n",
            "nvcc = \"13.0\"\ncomponents = [\"nvidia-curand\"]\n",
        ),
    );
    let err = stderr(&p.kart(&["build"]));
    assert!(
        err.contains("kart.toml:") && err.contains("is not pinned as NAME==VERSION"),
        "{err}"
    );
}
