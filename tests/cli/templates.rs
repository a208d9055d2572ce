//! Kernels as their authors write them: template entries over params, with the real nvcc.

use crate::harness::{TestProject, stderr, stdout, text};

/// Two template kernels whose template parameters share the params' names, and an
/// `extern "C"` one, in one source.
fn template_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/t/t.cu",
        r#"
template <int BLOCK, int SCALE, typename T>
__global__ void scale(T *out, const T *in, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) out[i] = in[i] * (T)SCALE;
}
template <int BLOCK>
__global__ void fill(float *out, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) out[i] = (float)BLOCK * OFFSET;
}
extern "C" __global__ void plain(float *out) { out[0] = OFFSET; }
"#,
    );
    p.write(
        "kernels/t/kernel.toml",
        r#"name = "t"
sources = ["t.cu"]
entry = ["scale<BLOCK, SCALE * 2, T>", "fill<BLOCK>", "plain"]
[params]
BLOCK = [64, 128]
SCALE = [3]
T = ["float", "double"]
OFFSET = [1]
[signature]
scale = ["ptr", "ptr", "i32"]
"#,
    );
    p
}

#[test]
fn template_entries_build_with_params_as_template_arguments_and_are_found_by_name() {
    let p = template_project();
    // Each config alone: one command line per config to look at.
    p.ok(&["build", "--batch", "1"]);
    assert_eq!(p.compiles(), 4);
    // Params a template entry uses are template arguments only; the rest are macros.
    for line in p.compile_lines() {
        assert!(line.contains("-DOFFSET=1"), "{line}");
        for name in ["BLOCK", "SCALE", "T"] {
            assert!(!line.contains(&format!("-D{name}=")), "{line}");
        }
    }
    let lock = p.read("kart.lock");
    assert!(lock.contains("version = 3"), "{lock}");
    assert!(
        lock.contains(r#"template = "scale<BLOCK, SCALE * 2, T>""#),
        "{lock}"
    );
    assert!(
        lock.contains(r#"instance = "scale<128, 3 * 2, double>""#),
        "{lock}"
    );
    // The mangled symbol, as the Itanium ABI spells scale<128, 6, double>.
    assert!(
        lock.contains(r#"symbol = "_Z5scaleILi128ELi6EdEvPT1_PKS0_i""#),
        "{lock}"
    );
    assert!(lock.contains(r#"symbol = "_Z4fillILi64EEvPfi""#), "{lock}");

    // `ls` and `path` speak the names callers use; `path --json` gives the symbol.
    let ls = stdout(&p.ok(&["ls"]));
    assert!(ls.contains("ENTRIES"), "{ls}");
    assert!(
        ls.contains("scale<64, 3 * 2, float> fill<64> plain"),
        "{ls}"
    );
    let path = stdout(&p.ok(&[
        "path", "t", "-p", "BLOCK=64", "-p", "SCALE=3", "-p", "T=float", "-p", "OFFSET=1",
        "--target", "sm_90", "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&path).unwrap();
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries[0]["name"], "scale");
    assert_eq!(entries[0]["symbol"], "_Z5scaleILi64ELi6EfEvPT1_PKS0_i");
    assert_eq!(entries[2]["symbol"], "plain");
    let explain = stdout(&p.ok(&[
        "explain", "t", "-p", "BLOCK=64", "-p", "SCALE=3", "-p", "T=float", "-p", "OFFSET=1",
    ]));
    assert!(
        explain.contains("entry fill: fill<BLOCK> = fill<64> -> _Z4fillILi64EEvPfi"),
        "{explain}"
    );

    // A no-op build compiles nothing; editing the expression rebuilds.
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    let toml = p.read("kernels/t/kernel.toml");
    p.write(
        "kernels/t/kernel.toml",
        &toml.replace("SCALE * 2, T>", "SCALE * 4, T>"),
    );
    p.ok(&["build", "--batch", "1"]);
    assert_eq!(p.compiles(), 4);
    assert!(
        p.read("kart.lock")
            .contains("_Z5scaleILi128ELi12EdEvPT1_PKS0_i")
    );
}

#[test]
fn param_macros_all_passes_every_param_as_a_macro_too() {
    // The template parameter has its own name here: `all` makes N a macro as well.
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/m/m.cu",
        r#"
template <int K>
__global__ void twice(float *out) { out[threadIdx.x] = K * 2 + WIDTH + N; }
"#,
    );
    p.write(
        "kernels/m/kernel.toml",
        r#"name = "m"
sources = ["m.cu"]
entry = ["twice<N>"]
param_macros = "all"
[params]
N = [1, 2]
WIDTH = [4]
"#,
    );
    p.ok(&["build"]);
    for line in p.compile_lines() {
        assert!(
            line.contains("-DN=") && line.contains("-DWIDTH=4"),
            "{line}"
        );
    }
}

#[test]
fn a_wrong_entry_expression_says_what_and_where() {
    let p = template_project();
    let toml = p.read("kernels/t/kernel.toml");
    // Not an expression at all: refused at load with the line and column.
    p.write(
        "kernels/t/kernel.toml",
        &toml.replace("\"fill<BLOCK>\"", "\"fill<BLOCK\""),
    );
    let out = p.kart(&["build"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("kernel.toml:3:") && err.contains("must end with the `>`"),
        "{err}"
    );
    // Two entries with one name.
    p.write(
        "kernels/t/kernel.toml",
        &toml.replace("\"fill<BLOCK>\"", "\"fill<BLOCK>\", \"fill<SCALE>\""),
    );
    let err = stderr(&p.kart(&["build"]));
    assert!(err.contains("two entries are named `fill`"), "{err}");
    // A template the source does not define: nvcc's own words, framed.
    p.write(
        "kernels/t/kernel.toml",
        &toml.replace("\"fill<BLOCK>\"", "\"fil<BLOCK>\""),
    );
    let out = p.kart(&["build"]);
    assert!(!out.status.success());
    let all = text(&out);
    assert!(all.contains("nvcc failed") && all.contains("fil"), "{all}");
}

/// A syntax error in the source every config of a template kernel shares fails the
/// batch once: nvcc's message is printed once, the configs are not compiled again one by
/// one for the same error, and no message names the build's scratch folder.
#[test]
fn a_syntax_error_shared_by_six_configs_is_printed_once_without_temp_paths() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/tile/tile.cu",
        "template <int BM, int BN>\n__global__ void tile(float *x) {\n  int i = threadIdx.x\n  x[i] = BM * BN;\n}\n",
    );
    p.write(
        "kernels/tile/kernel.toml",
        "name = \"tile\"\nsources = [\"tile.cu\"]\nentry = [\"tile<BM, BN>\"]\n[params]\nBM = [32, 64, 128]\nBN = [1, 2]\n",
    );
    let out = p.kart(&["build", "--batch", "6", "-j", "1"]);
    assert!(!out.status.success());
    let all = text(&out);
    assert_eq!(all.matches("expected a \";\"").count(), 1, "{all}");
    assert!(!all.contains("tmp-kart"), "{all}");
    assert!(!all.contains("config by config"), "{all}");
    assert_eq!(all.matches("the same error as").count(), 5, "{all}");
    assert!(all.contains("kernels/tile/tile.cu(4)"), "{all}");
}

/// A derived param the source computes itself (as a public warp-tiled SGEMM declares
/// `constexpr uint WMITER = …`) is not passed as `-DWMITER=…` under `param_macros =
/// "auto"`; a derived param the source only uses (as the repository's sgemm uses
/// THREADS) still is.
#[test]
fn a_derived_param_the_source_declares_is_not_a_macro() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/warps/warps.cu",
        r#"constexpr unsigned WMITER = (WM * WN) / (32 * TM * WNITER);
extern "C" __global__ void warps(float* out) {
  out[threadIdx.x] = float(WMITER * THREADS);
}
"#,
    );
    p.write(
        "kernels/warps/kernel.toml",
        r#"name = "warps"
sources = ["warps.cu"]
entry = ["warps"]

[params]
WM = [64]
WN = [64]
TM = [8]
WNITER = [4]

[derived]
WMITER = "(WM * WN) / (32 * TM * WNITER)"
THREADS = "WM * 2"
"#,
    );
    p.ok(&["build"]);
    let line = p.compile_lines().into_iter().next().unwrap_or_default();
    assert!(
        line.contains("-DTHREADS=128") && !line.contains("-DWMITER"),
        "{line}"
    );
    let explain = stdout(&p.ok(&[
        "explain", "warps", "-p", "WM=64", "-p", "WN=64", "-p", "TM=8", "-p", "WNITER=4",
    ]));
    assert!(
        explain.contains("param macros passed: TM WM WN WNITER THREADS"),
        "{explain}"
    );
}

#[test]
fn a_batch_of_configs_gives_the_bytes_each_config_gives_alone() {
    // Four configs of a template entry, one of which does not compile.
    let source = r#"
template <int BLOCK, int WAYS>
__global__ void tile(float *out, int n) {
  static_assert(BLOCK * WAYS != 512, "this config is broken on purpose");
  __shared__ float stage[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  stage[threadIdx.x] = i < n ? (float)(WAYS * i) : 0.0f;
  __syncthreads();
  if (i < n) out[i] = stage[(threadIdx.x + WAYS) % BLOCK];
}
extern "C" __global__ void plain(float *out) { out[0] = 1.0f; }
"#;
    let toml = "name = \"b\"\nsources = [\"b.cu\"]\nentry = [\"tile<BLOCK, WAYS>\", \"plain\"]\n[params]\nBLOCK = [64, 128, 256]\nWAYS = [1, 2]\n";
    let project = || {
        let p = TestProject::new(&["sm_90"]);
        p.write("kernels/b/b.cu", source);
        p.write("kernels/b/kernel.toml", toml);
        p
    };
    let batched = project();
    let out = batched.kart(&["build", "--batch", "6", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // One front-end pass for all six; it failed on tile<256, 2>, so each was compiled
    // alone and only that one failed, with nvcc's own message.
    let passes: Vec<String> = batched
        .compile_lines()
        .into_iter()
        .filter(|l| l.starts_with("-ptx "))
        .collect();
    assert_eq!(passes.len(), 1, "{passes:?}");
    let err = stderr(&out);
    assert!(
        err.contains("1 of 6 artifacts failed")
            && err.contains("b[BLOCK=256,WAYS=2] sm_90")
            && err.contains("this config is broken on purpose"),
        "{err}"
    );

    // Without the broken config: one pass, and the bytes of each config alone.
    let fixed = toml.replace(
        "WAYS = [1, 2]\n",
        "WAYS = [1, 2]\n[[exclude]]\nBLOCK = 256\nWAYS = 2\n",
    );
    let alone = project();
    alone.write("kernels/b/kernel.toml", &fixed);
    alone.ok(&["build", "--batch", "1"]);
    batched.write("kernels/b/kernel.toml", &fixed);
    batched.clear_log();
    let out = batched.ok(&["build", "--batch", "5", "--jobs", "1"]);
    assert!(
        stderr(&out).contains("5 artifacts: 0 compiled, 5 from the store"),
        "what the failed build compiled was kept: {}",
        text(&out)
    );
    let fresh = project();
    fresh.write("kernels/b/kernel.toml", &fixed);
    let out = fresh.ok(&["build", "--batch", "5", "--jobs", "1"]);
    // Every config came out of the batch: none was compiled alone afterwards.
    assert!(!stderr(&out).contains("compiled alone"), "{}", text(&out));
    assert!(
        !fresh
            .compile_lines()
            .iter()
            .any(|l| l.starts_with("-cubin ")),
        "{:?}",
        fresh.compile_lines()
    );
    let passes = fresh
        .compile_lines()
        .into_iter()
        .filter(|l| l.starts_with("-ptx "))
        .count();
    assert_eq!(passes, 1, "{:?}", fresh.compile_lines());
    let digests = |p: &TestProject| crate::harness::lock_digests(p);
    assert_eq!(digests(&fresh), digests(&alone));
    assert_eq!(digests(&batched), digests(&alone));
    assert_eq!(digests(&alone).len(), 5);
}

/// Kernels as libraries write them: in namespaces, with enum, unsigned, bool and type
/// template arguments (the entry over two lines), and plain C++ `__global__` functions
/// (mangled, one of them overloaded) in a `.cuh` header.
fn library_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/nsk/nsk.cu",
        r#"
namespace lib {
enum class Mode { A, B };
template <Mode M, unsigned N, bool F, typename T>
__global__ void gemm(T *out) {
  if (threadIdx.x == 0) out[blockIdx.x] = T((M == Mode::B ? 2 : 1) * N + (F ? 1 : 0));
}
}  // namespace lib
"#,
    );
    p.write(
        "kernels/nsk/kernel.toml",
        r#"name = "nsk"
sources = ["nsk.cu"]
entry = ["""lib::gemm<MODE,
    N, true, T>"""]
[params]
MODE = ["lib::Mode::A", "lib::Mode::B"]
N = [4096, 8192]
T = ["float", "double"]
"#,
    );
    p.write(
        "kernels/plain/scale.cuh",
        r#"
namespace lib2 {
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
__global__ void twice(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2.0f; }
__global__ void twice(double *x, long n) { if (threadIdx.x < n) x[threadIdx.x] *= 2.0; }
}  // namespace lib2
"#,
    );
    p.write(
        "kernels/plain/kernel.toml",
        r#"name = "plain"
sources = ["scale.cuh"]
entry = ["lib2::scale", "lib2::twice"]
[params]
BLOCK = [128, 256]
[signature]
"lib2::twice" = ["ptr", "i64"]
"#,
    );
    p
}

#[test]
fn kernels_in_namespaces_and_plain_cpp_kernels_reach_the_lock_by_their_names() {
    let p = library_project();
    let out = p.ok(&["build", "--batch", "8"]);
    // Every config of `nsk` found in its batch's PTX (none compiled again alone); the
    // two modes in separate batches (an enumerator demangles to a number).
    assert!(!text(&out).contains("compiled alone"), "{}", text(&out));
    let nsk_compiles = p
        .compile_lines()
        .iter()
        .filter(|l| l.contains("nsk"))
        .count();
    assert_eq!(nsk_compiles, 2, "{:?}", p.compile_lines());

    let ls: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    let rows = ls.as_array().unwrap();
    assert_eq!(rows.len(), 8 + 2, "{ls}");

    let path = stdout(&p.ok(&[
        "path",
        "nsk",
        "-p",
        "MODE=lib::Mode::B",
        "-p",
        "N=8192",
        "-p",
        "T=double",
        "--target",
        "sm_90",
        "--json",
    ]));
    let path: serde_json::Value = serde_json::from_str(&path).unwrap();
    let entry = &path["entries"][0];
    assert_eq!(entry["name"], "lib::gemm", "{path}");
    assert_eq!(
        entry["instance"], "lib::gemm<lib::Mode::B, 8192, true, double>",
        "{path}"
    );
    // Mode::B is 1, 8192 unsigned (`j`), true, double (`d`).
    assert_eq!(
        entry["symbol"], "_ZN3lib4gemmILNS_4ModeE1ELj8192ELb1EdEEvPT2_",
        "{path}"
    );

    let path = stdout(&p.ok(&[
        "path",
        "plain",
        "-p",
        "BLOCK=128",
        "--target",
        "sm_90",
        "--json",
    ]));
    let path: serde_json::Value = serde_json::from_str(&path).unwrap();
    assert_eq!(path["entries"][0]["name"], "lib2::scale", "{path}");
    assert_eq!(path["entries"][0]["symbol"], "_ZN4lib25scaleEPfi", "{path}");
    // Of the two overloads, the one `[signature]` describes.
    assert_eq!(path["entries"][1]["name"], "lib2::twice", "{path}");
    assert_eq!(path["entries"][1]["symbol"], "_ZN4lib25twiceEPdl", "{path}");

    // Nothing is compiled again: every artifact was recorded.
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0, "{:?}", p.compile_lines());
    p.ok(&["build", "--locked"]);
}

#[test]
fn an_overload_no_signature_decides_and_an_unrecordable_argument_are_errors() {
    let p = library_project();
    p.write(
        "kernels/plain/kernel.toml",
        "name = \"plain\"\nsources = [\"scale.cuh\"]\nentry = [\"lib2::twice\"]\n[params]\nBLOCK = [128]\n",
    );
    let out = p.kart(&["build", "plain"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("`lib2::twice` has 2 overloads")
            && stderr(&out).contains("[signature]"),
        "{}",
        text(&out)
    );
    assert!(!p.root().join("kart.lock").exists());

    // A template argument the lock could not hold is refused where it is written.
    p.write(
        "kernels/plain/kernel.toml",
        "name = \"plain\"\nsources = [\"scale.cuh\"]\nentry = [\"pick<'x'>\"]\n",
    );
    let out = p.kart(&["ls"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("kernels/plain/kernel.toml:3:") && stderr(&out).contains("pick<'x'>"),
        "{}",
        text(&out)
    );
}

/// A grid whose corner needs more static shared memory than the target has: ptxas's
/// reason is printed once for the three configs over the limit, the build fails, and it
/// prints the `require` rule that excludes exactly those; with the rule, the rest locks.
#[test]
fn a_grid_corner_over_the_shared_memory_limit_is_reported_once_with_a_rule() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/big/big.cu",
        r#"template <int ROWS, int COLS>
__global__ void big(float *out) {
  __shared__ float tile[ROWS * COLS];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % (ROWS * COLS)];
}
"#,
    );
    let toml = "name = \"big\"\nsources = [\"big.cu\"]\nentry = [\"big<ROWS, COLS>\"]\n[params]\nROWS = [8, 16, 32, 64]\nCOLS = [256, 512]\n";
    p.write("kernels/big/kernel.toml", toml);
    let out = p.kart(&["build", "-j", "1"]);
    assert!(!out.status.success());
    let all = text(&out);
    assert!(all.matches("too much shared data").count() <= 1, "{all}");
    assert!(all.contains("3 of 8 artifacts failed"), "{all}");
    assert!(
        all.contains(r#"add require = ["COLS * ROWS < 16384"] to kernels/big/kernel.toml"#),
        "{all}"
    );
    assert!(!all.contains("compiled alone"), "{all}");
    p.write(
        "kernels/big/kernel.toml",
        &toml.replace("[params]", "require = [\"COLS * ROWS < 16384\"]\n[params]"),
    );
    let out = p.kart(&["build"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("kart.lock").matches("[[artifact]]").count(), 5);
}

/// A template whose static shared memory is `ROWS * COLS` floats: over sm_90's 48 KiB
/// from `ROWS * COLS = 16384` up (3 of the 8 configs).
fn shared_memory_corner(p: &TestProject) -> String {
    p.write(
        "kernels/big/big.cu",
        r#"template <int ROWS, int COLS>
__global__ void big(float *out) {
  __shared__ float tile[ROWS * COLS];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % (ROWS * COLS)];
}
"#,
    );
    let toml = "name = \"big\"\nsources = [\"big.cu\"]\nentry = [\"big<ROWS, COLS>\"]\n\n[params]\nROWS = [8, 16, 32, 64]\nCOLS = [256, 512]\n";
    p.write("kernels/big/kernel.toml", toml);
    toml.to_string()
}

#[test]
fn skip_infeasible_locks_the_feasible_rest_and_records_the_rule_in_kernel_toml() {
    let p = TestProject::new(&["sm_90"]);
    shared_memory_corner(&p);
    let out = p.kart(&["build", "--skip-infeasible", "-j", "1"]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.matches("too much shared data").count() <= 1, "{all}");
    assert!(all.contains("3 over a resource limit excluded"), "{all}");
    // The rule, with why, where the grid is written and reviewed.
    let toml = p.read("kernels/big/kernel.toml");
    assert!(
        toml.contains(
            "# 3 config(s) infeasible on sm_90: needs more shared data than its limit of 49152 bytes (ptxas); \
             excluded by kart build --skip-infeasible\nrequire = [\"COLS * ROWS < 16384\"]\n\n[params]"
        ),
        "{toml}"
    );
    // Exactly the feasible configs are locked.
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 5, "{lock}");
    let ls = p.kart(&["ls", "--json"]);
    assert!(ls.status.success(), "{}", text(&ls));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&ls)).unwrap();
    let mut products: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["config"]["ROWS"].as_i64().unwrap() * a["config"]["COLS"].as_i64().unwrap())
        .collect();
    products.sort();
    assert_eq!(products, [2048, 4096, 4096, 8192, 8192]);
    // The rule is part of the grid now: a second build is a no-op, and --locked agrees.
    let again = p.kart(&["build"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        stderr(&again).contains("0 compiled, 5 from the store"),
        "{}",
        text(&again)
    );
    assert!(
        stderr(&again).contains("kart.lock unchanged"),
        "{}",
        text(&again)
    );
    let locked = p.kart(&["build", "--locked"]);
    assert!(locked.status.success(), "{}", text(&locked));
}

#[test]
fn skip_infeasible_still_fails_on_a_real_compile_error_and_changes_nothing() {
    let p = TestProject::new(&["sm_90"]);
    let toml = shared_memory_corner(&p);
    p.write(
        "kernels/bad/bad.cu",
        "extern \"C\" __global__ void bad(float *o) { o[0] = missing; }\n",
    );
    p.write(
        "kernels/bad/kernel.toml",
        "name = \"bad\"\nsources = [\"bad.cu\"]\nentry = [\"bad\"]\n",
    );
    let lock_before = std::fs::read_to_string(p.root().join("kart.lock")).ok();
    let out = p.kart(&["build", "--skip-infeasible", "-j", "1"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("identifier \"missing\" is undefined"), "{all}");
    assert!(all.contains("require = [\"COLS * ROWS < 16384\"]"), "{all}");
    assert_eq!(p.read("kernels/big/kernel.toml"), toml);
    assert_eq!(
        std::fs::read_to_string(p.root().join("kart.lock")).ok(),
        lock_before
    );
}

/// `nvcc --dryrun`, which tells a batch how nvcc runs ptxas, is asked once per kernel,
/// target and command line in a build, not once per batch; a kernel whose flags change
/// ptxas's arguments gets its own answer, and every batch's cubins are those each
/// config gives alone.
#[test]
fn a_build_asks_nvcc_dryrun_once_per_command_line_and_follows_changed_flags() {
    let source = r#"
template <int BLOCK, int WAYS>
__global__ void step(float *out, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  float acc = 0.0f;
  for (int w = 0; w < WAYS; ++w) acc += out[(i + w * BLOCK) % n] * (float)(w + 1);
  if (i < n) out[i] = acc;
}
"#;
    let kernel = |name: &str, flags: &str| {
        format!(
            "name = \"{name}\"\nsources = [\"{name}.cu\"]\nentry = [\"step<BLOCK, WAYS>\"]\nflags = [{flags}]\n[params]\nBLOCK = [64, 128]\nWAYS = [1, 2, 3]\n"
        )
    };
    let project = || {
        let p = TestProject::new(&["sm_80", "sm_90"]);
        for name in ["fast", "slow"] {
            p.write(&format!("kernels/{name}/{name}.cu"), source);
        }
        p.write("kernels/fast/kernel.toml", &kernel("fast", "\"-O3\""));
        // ptxas at -O0: another ptxas command line, other cubins.
        p.write(
            "kernels/slow/kernel.toml",
            &kernel("slow", "\"-O3\", \"-Xptxas\", \"-O0\""),
        );
        p
    };
    let batched = project();
    batched.ok(&["build", "--batch", "2", "--jobs", "1"]);
    let log = std::fs::read_to_string(&batched.nvcc_log).unwrap();
    let passes = log.lines().filter(|l| l.starts_with("-ptx ")).count();
    let dryruns: Vec<&str> = log.lines().filter(|l| l.contains("--dryrun")).collect();
    // 2 kernels x 2 targets x 3 batches of 2 configs; one question per kernel and target.
    assert_eq!(passes, 12, "{log}");
    assert_eq!(dryruns.len(), 4, "{dryruns:#?}");
    let alone = project();
    alone.ok(&["build", "--batch", "1"]);
    let digests = |p: &TestProject| crate::harness::lock_digests(p);
    assert_eq!(digests(&batched), digests(&alone));
    // The flags reached ptxas: the two kernels' cubins differ, config by config.
    let lock = batched.read("kart.lock");
    let fast: Vec<&str> = digests_of(&lock, "fast");
    let slow: Vec<&str> = digests_of(&lock, "slow");
    assert_eq!((fast.len(), slow.len()), (12, 12), "{lock}");
    assert!(fast.iter().zip(&slow).all(|(f, s)| f != s), "{lock}");

    // The flags edited between two builds: the next build asks again and follows them.
    let before: Vec<String> = slow.iter().map(|d| d.to_string()).collect();
    batched.write(
        "kernels/slow/kernel.toml",
        &kernel("slow", "\"-O3\", \"-Xptxas\", \"-O1\""),
    );
    batched.clear_log();
    batched.ok(&["build", "--batch", "2", "--jobs", "1"]);
    let log = std::fs::read_to_string(&batched.nvcc_log).unwrap();
    let dryruns: Vec<&str> = log.lines().filter(|l| l.contains("--dryrun")).collect();
    assert_eq!(dryruns.len(), 2, "{dryruns:#?}");
    assert!(
        dryruns.iter().all(|l| l.contains("-Xptxas -O1")),
        "{dryruns:#?}"
    );
    let lock = batched.read("kart.lock");
    let after = digests_of(&lock, "slow");
    assert!(after.iter().zip(&before).all(|(a, b)| a != b), "{lock}");
    let out = batched.ok(&["verify", "--rebuild", "4", "--seed", "3"]);
    assert!(stdout(&out).contains("0 differ"), "{}", text(&out));
}

/// The digests of kernel `name`'s records in a lock's text, in its order.
fn digests_of<'a>(lock: &'a str, name: &str) -> Vec<&'a str> {
    lock.split("[[artifact]]")
        .filter(|record| record.contains(&format!("kernel = \"{name}\"")))
        .filter_map(|record| {
            record
                .lines()
                .find_map(|l| l.strip_prefix("digest = \""))
                .map(|d| d.trim_end_matches('"'))
        })
        .collect()
}
