//! What kernel.toml says to the compiled unit besides params: macros without a value,
//! params that choose which macro is defined, and a template kernel's `prelude`.

use std::collections::BTreeSet;

use crate::harness::{TestProject, lock_digests, stderr, stdout, text};

/// A kernel whose source `#ifdef`s on macros chosen by params and fixed defines.
fn macro_project(extra: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "prec",
        r#"#ifndef FAST
#error FAST is defined by `defines = { FAST = true }`
#endif
#ifdef SLOW
#error SLOW = false defines nothing
#endif
#if defined(ENABLE_BF16)
    out[0] = 16.0f;
#elif defined(ENABLE_FP16)
    out[0] = 8.0f;
#else
#error no precision chosen
#endif
#ifdef USE_X
    out[1] = 1.0f;
#endif"#,
        &format!(
            "define_params = [\"PRECISION\", \"USE_X\"]\ndefines = {{ FAST = true, SLOW = false }}\n{extra}[params]\nPRECISION = [\"ENABLE_BF16\", \"ENABLE_FP16\"]\nUSE_X = [true, false]\n"
        ),
    );
    p
}

#[test]
fn a_param_chooses_the_macro_defined_and_each_choice_is_its_own_artifact() {
    let p = macro_project("");
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 4);
    let lines = p.compile_lines();
    for line in &lines {
        assert!(
            line.contains(" -DFAST ") && !line.contains("SLOW"),
            "{line}"
        );
        assert!(
            !line.contains("-DPRECISION") && !line.contains("=true"),
            "{line}"
        );
    }
    let with = |m: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!(" {m} ")))
            .count()
    };
    assert_eq!(
        (
            with("-DENABLE_BF16"),
            with("-DENABLE_FP16"),
            with("-DUSE_X")
        ),
        (2, 2, 2),
        "{lines:?}"
    );
    // Four sources as nvcc saw them: four different cubins.
    let digests: BTreeSet<String> = lock_digests(&p).into_iter().collect();
    assert_eq!(digests.len(), 4, "{}", p.read("kart.lock"));
    let lock = p.read("kart.lock");
    assert!(lock.contains("PRECISION = \"ENABLE_BF16\""), "{lock}");
    // The key names the choice; `path` finds a config by its value.
    let out = p.ok(&[
        "explain",
        "prec",
        "-p",
        "PRECISION=ENABLE_FP16",
        "-p",
        "USE_X=true",
    ]);
    let shown = stdout(&out);
    assert!(shown.contains("define params: PRECISION USE_X"), "{shown}");
    assert!(
        shown.contains("define FAST: (defined, no value)"),
        "{shown}"
    );
    p.ok(&[
        "path",
        "prec",
        "-p",
        "PRECISION=ENABLE_BF16",
        "-p",
        "USE_X=false",
        "--target",
        "sm_90",
    ]);
    p.ok(&["build", "--locked"]);
}

#[test]
fn a_bad_define_param_value_or_a_conflicting_define_is_an_error_at_its_line() {
    for (extra, values, want) in [
        (
            "",
            "PRECISION = [\"lib::BF16\"]",
            "kernel.toml:6:14: `PRECISION` is in `define_params`, so each value names the macro a config defines, and `lib::BF16` is not a C identifier",
        ),
        ("", "PRECISION = [16]", "`16` is a number"),
        (
            "defines = { ENABLE_BF16 = 1 }\n",
            "PRECISION = [\"ENABLE_BF16\"]",
            "define param `PRECISION` would pass -DENABLE_BF16, and `ENABLE_BF16` is also a key of `defines`: the two forms conflict",
        ),
        (
            "",
            "PRECISION = [\"BLOCK\"]\nBLOCK = [64]",
            "`BLOCK` is also a param (passed as its own macro)",
        ),
    ] {
        let p = TestProject::new(&["sm_90"]);
        p.kernel(
            "k",
            "out[0] = 1;",
            &format!("define_params = [\"PRECISION\"]\n{extra}[params]\n{values}\n"),
        );
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = stderr(&out);
        assert!(err.contains("kernels/k/kernel.toml:"), "{err}");
        assert!(err.contains(want), "{want}\n{err}");
        assert_eq!(p.compiles(), 0);
    }
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "k",
        "out[0] = 1;",
        "define_params = [\"NOPE\"]\n[params]\nA = [1]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kernel.toml:4:18: `define_params` names `NOPE`, which is not a param")
            && err.contains("params of this kernel: A"),
        "{err}"
    );
}

/// A namespaced template over an enum and an unsigned, written as the library writes it
/// inside its namespace.
fn prelude_project(prelude: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/nsk/nsk.cuh",
        r#"namespace lib {
enum class Mode { A, B };
template <Mode M, unsigned N>
__global__ void gemm(float *out) { out[0] = (M == Mode::B ? 2.0f : 1.0f) * N; }
}
"#,
    );
    p.write(
        "kernels/nsk/kernel.toml",
        &format!(
            "name = \"nsk\"\nsources = [\"nsk.cuh\"]\nentry = [\"gemm<Mode::B, N>\"]\nprelude = {prelude}\n[params]\nN = [64, 4096, 8192]\n"
        ),
    );
    p
}

#[test]
fn a_prelude_lets_an_entry_use_the_library_s_unqualified_spelling() {
    let p = prelude_project("\"\"\"\n// the library's own spelling\nusing namespace lib;\n\"\"\"");
    let out = p.ok(&["build", "--batch", "3"]);
    let err = stderr(&out);
    assert!(!err.contains("compiled alone"), "{err}");
    // One front-end pass for the three configs.
    assert_eq!(p.compiles(), 1, "{}", text(&out));
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 3, "{lock}");
    // Found by its mangled, qualified name: lib::gemm<(lib::Mode)1, 8192u>.
    assert!(
        lock.contains(r#"symbol = "_ZN3lib4gemmILNS_4ModeE1ELj8192EEEvPf""#),
        "{lock}"
    );
    p.ok(&["path", "nsk", "-p", "N=8192", "--target", "sm_90"]);
    let shown = stdout(&p.ok(&["explain", "nsk", "-p", "N=64"]));
    assert!(
        shown.contains("prelude: // the library's own spelling | using namespace lib;"),
        "{shown}"
    );
    p.ok(&["build", "--locked"]);
}

#[test]
fn a_prelude_that_would_swallow_kart_s_lines_is_refused_at_its_line() {
    for (prelude, want) in [
        (
            "\"using namespace lib; /* and the rest\"",
            "kernel.toml:4:11: `prelude` has an unterminated `/*` comment, which would swallow the lines kart writes after it",
        ),
        ("\"#if 0\"", "leaves 1 `#if` without its `#endif`"),
        ("\"using namespace lib; \\\\\"", "continues its last line"),
        ("\"namespace lib {\"", "leaves a `{` open"),
        (
            "\"using namespace lib;\\u0000\"",
            "contains a NUL character",
        ),
    ] {
        let p = prelude_project(prelude);
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{prelude}: {}", text(&out));
        let err = stderr(&out);
        assert!(err.contains("kernels/nsk/kernel.toml:"), "{err}");
        assert!(err.contains(want), "{want}\n{err}");
        assert_eq!(p.compiles(), 0);
    }
    let p = prelude_project(&format!("\"{}\"", "using T = int; ".repeat(2000)));
    let err = stderr(&p.kart(&["build"]));
    assert!(err.contains("over the 16384 a prelude may hold"), "{err}");
    // A kernel without template entries has no generated unit to put it in.
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "prelude = \"using namespace lib;\"\n");
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("`prelude` is for the unit kart generates for template entries"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_profiler_api_header_a_training_library_includes_names_its_wheel() {
    // llm.c's cuda_common.h includes <cuda_profiler_api.h> beside the NVTX headers, in a
    // .cuh of plain C++ kernels; the header is in a wheel of its own.
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/prof/prof.cuh",
        "#include <cuda_profiler_api.h>\n__global__ void mark(int *flag) { flag[threadIdx.x] = 7; }\n",
    );
    p.write(
        "kernels/prof/kernel.toml",
        "name = \"prof\"\nsources = [\"prof.cuh\"]\nentry = [\"mark\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("prof[-] sm_90: nvcc failed (exit status: ")
            && err.contains(
                "): `cuda_profiler_api.h` is in NVIDIA's `nvidia-cuda-profiler-api` wheel, not in nvcc's"
            )
            && err.contains("components = [\"nvidia-cuda-profiler-api==VERSION\"]"),
        "{err}"
    );
}

#[test]
fn a_toolkit_header_of_a_component_not_declared_names_the_line_to_add() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/blas/blas.cu",
        "#include <cublas_v2.h>\nextern \"C\" __global__ void blas(float *out) { out[0] = 1; }\n",
    );
    p.write(
        "kernels/blas/kernel.toml",
        "name = \"blas\"\nsources = [\"blas.cu\"]\nentry = [\"blas\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("blas[-] sm_90: nvcc failed (exit status: ")
            && err.contains("): `cublas_v2.h` is in NVIDIA's `nvidia-cublas` wheel, not in nvcc's")
            && err.contains("components = [\"nvidia-cublas==VERSION\"]")
            && err.contains("kart toolchain install"),
        "{err}"
    );
}
