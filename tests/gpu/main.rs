//! GPU tests: the runtime on a real device. Built here (`cargo test --release --no-run
//! --test gpu`), run on the GPU machine with KART_REQUIRE_GPU=1 and `kart` on the PATH.
//! Elsewhere they print `skipped: no CUDA GPU (N tests)`.
//!
//! Every GPU test in one binary with its own small harness, so that a machine without a
//! GPU prints one `skipped: no CUDA GPU` line for all of them and the GPU machine runs
//! one staged file. The tests live in one module per theme; this file holds the
//! fixture, the table of tests (their names are what `test NAME ... ok` prints) and the
//! runner.

mod clusters;
mod deploy;
mod dual_gemm;
mod hopper;
mod python;
mod runtime;

use std::path::PathBuf;
use std::time::Duration;

use kart::model::{Config, ParamValue};
use kart::pipeline::{BuildOptions, build};
use kart::pool::Silent;
use kart::project::Project;
use kart::runtime::{Gpu, Runtime};
use kart::store::LockMode;
use kart::workspace::Workspace;

type TestResult = Result<(), String>;

/// A project built once for all tests: a grid kernel for sm_80, sm_90 and sm_90a, a
/// kernel using 64 KiB of dynamic shared memory, and one built only for sm_80.
struct Fixture {
    dir: tempfile::TempDir,
}

const GRID_CU: &str = r#"
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * FACTOR + OFFSET;
}
extern "C" __global__ void fill(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR;
}
"#;

const SMEM_CU: &str = r#"
// Stages the input through dynamic shared memory larger than the 48 KiB default.
extern "C" __global__ void big_smem(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    int per_block = n / gridDim.x;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) buf[i] = x[blockIdx.x * per_block + i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x)
        y[blockIdx.x * per_block + i] = buf[per_block - 1 - i];
}
"#;

// A template entry taking a struct by value (12 bytes, aligned to 4).
const AFFINE_CU: &str = r#"
struct Affine { float scale; float shift; int n; };
template <int UNROLL>
__global__ void affine(const float* x, float* y, Affine p) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
    for (int u = 0; u < UNROLL; ++u)
        if (base + u < p.n) y[base + u] = x[base + u] * p.scale + p.shift;
}
"#;

impl Fixture {
    fn build() -> Result<Fixture, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let w = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "kart.toml",
            "[project]\ntargets = [\"sm_80\", \"sm_90\", \"sm_90a\"]\n[toolchain]\nnvcc = \"13.0\"\n",
        );
        w("kernels/scale/scale.cu", GRID_CU);
        w(
            "kernels/scale/kernel.toml",
            "name = \"scale\"\nsources = [\"scale.cu\"]\nentry = [\"scale\", \"fill\"]\n[params]\nFACTOR = [2, 3]\nOFFSET = [0, 1]\n",
        );
        w("kernels/smem/smem.cu", SMEM_CU);
        w(
            "kernels/smem/kernel.toml",
            "name = \"smem\"\nsources = [\"smem.cu\"]\nentry = [\"big_smem\"]\ntargets = [\"sm_90\"]\n[signature]\nbig_smem = [\"ptr\", \"ptr\", \"i32\"]\n[launch]\ngrid = [\"min(cdiv(N, 16384), SMS)\"]\nblock = [\"256\"]\nproblem = [\"N\"]\nshared_mem = \"65536\"\n",
        );
        w("kernels/affine/affine.cu", AFFINE_CU);
        w(
            "kernels/affine/kernel.toml",
            "name = \"affine\"\nsources = [\"affine.cu\"]\nentry = [\"affine<UNROLL>\"]\ntargets = [\"sm_90\"]\n[params]\nUNROLL = [1, 2]\n[signature]\naffine = [\"ptr\", \"ptr\", \"struct:12:4\"]\n",
        );
        w(
            "kernels/old/old.cu",
            "extern \"C\" __global__ void old(float* y) { y[0] = 1; }\n",
        );
        w(
            "kernels/old/kernel.toml",
            "name = \"old\"\nsources = [\"old.cu\"]\nentry = [\"old\"]\ntargets = [\"sm_80\"]\n",
        );
        let project = Project::load(dir.path()).map_err(|e| e.to_string())?;
        let ws = Workspace::open(project, LockMode::Shared, Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        build(&ws, &BuildOptions::default(), &Silent).map_err(|e| format!("fixture build: {e}"))?;
        Ok(Fixture { dir })
    }

    fn runtime(&self) -> Runtime {
        Runtime::open(self.dir.path()).expect("open runtime")
    }
}

fn config(pairs: &[(&str, i64)]) -> Config {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ParamValue::Int(*v)))
        .collect::<Config>()
}

type Test = (&'static str, fn(&Fixture, &Gpu) -> TestResult);

const TESTS: &[Test] = &[
    ("smoke_end_to_end", runtime::smoke_end_to_end),
    (
        "every_entry_of_every_9x_artifact_resolves",
        runtime::every_entry_of_every_9x_artifact_resolves,
    ),
    ("launch_checks_results", runtime::launch_checks_results),
    (
        "a_bundle_loads_and_a_flipped_byte_is_refused",
        deploy::a_bundle_loads_and_a_flipped_byte_is_refused,
    ),
    (
        "a_struct_by_value_reaches_a_template_entry",
        runtime::a_struct_by_value_reaches_a_template_entry,
    ),
    (
        "tma_template_entry_and_cluster_launch_from_rust",
        hopper::tma_template_entry_and_cluster_launch_from_rust,
    ),
    (
        "an_sm80_cubin_on_a_9x_gpu_is_a_clear_error",
        runtime::an_sm80_cubin_on_a_9x_gpu_is_a_clear_error,
    ),
    (
        "a_corrupt_blob_is_refused_before_the_driver",
        runtime::a_corrupt_blob_is_refused_before_the_driver,
    ),
    (
        "more_than_48k_of_shared_memory_launches",
        runtime::more_than_48k_of_shared_memory_launches,
    ),
    (
        "a_driver_too_old_for_the_cubin_is_refused_before_loading",
        runtime::a_driver_too_old_for_the_cubin_is_refused_before_loading,
    ),
    (
        "cached_lookup_returns_the_loaded_module",
        runtime::cached_lookup_returns_the_loaded_module,
    ),
    (
        "python_export_launches_with_torch_and_cupy",
        python::python_export_launches_with_torch_and_cupy,
    ),
    (
        "smoke_all_attests_every_loadable_cubin_and_survives_a_crash",
        deploy::smoke_all_attests_every_loadable_cubin_and_survives_a_crash,
    ),
    (
        "python_module_in_cuda_graphs_and_torch_compile",
        python::python_module_in_cuda_graphs_and_torch_compile,
    ),
    (
        "a_variant_is_called_as_its_base_and_chosen_on_hopper",
        hopper::a_variant_is_called_as_its_base_and_chosen_on_hopper,
    ),
    (
        "causal_orders_of_flash_attn_hopper2_match_the_first_hopper_kernel",
        hopper::causal_orders_of_flash_attn_hopper2_match_the_first_hopper_kernel,
    ),
    (
        "split_k_variant_matches_its_base_bit_for_bit",
        dual_gemm::split_k_variant_matches_its_base_bit_for_bit,
    ),
    (
        "python_variants_are_called_alike_and_chosen_by_best",
        python::python_variants_are_called_alike_and_chosen_by_best,
    ),
    ("python_repository_sgemm", python::python_repository_sgemm),
    (
        "python_repository_flash_attn",
        python::python_repository_flash_attn,
    ),
    (
        "python_repository_cute_gemm",
        python::python_repository_cute_gemm,
    ),
    ("python_two_devices", python::python_two_devices),
    (
        "cluster_and_pdl_launches_from_launch_rules",
        clusters::cluster_and_pdl_launches_from_launch_rules,
    ),
];

/// A test's way of saying it cannot run on this machine (not a pass, not a failure):
/// `Err` with this prefix.
const SKIP: &str = "skipped: ";

/// The kart binary: the one cargo built here, else `kart` on PATH (the staged copy on
/// the GPU machine).
fn kart_bin() -> PathBuf {
    option_env!("CARGO_BIN_EXE_kart")
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("kart"))
}

fn run_kart(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(kart_bin());
    cmd.arg("-C").arg(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (-1, format!("cannot run {}: {e}", kart_bin().display())),
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()))
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let selected: Vec<&Test> = TESTS
        .iter()
        .filter(|(n, _)| filter.as_ref().is_none_or(|f| n.contains(f.as_str())))
        .collect();
    let require = std::env::var("KART_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: no CUDA GPU ({} tests): {e}", selected.len());
            if require {
                println!("KART_REQUIRE_GPU=1: a GPU was required");
                std::process::exit(1);
            }
            return;
        }
    };
    println!(
        "gpu: {} (compute capability {}), driver CUDA {}",
        gpu.name, gpu.capability, gpu.driver_version
    );
    let fixture = match Fixture::build() {
        Ok(f) => f,
        Err(e) => {
            println!("fixture failed: {e}");
            std::process::exit(1);
        }
    };
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, test) in selected {
        let t0 = std::time::Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&fixture, &gpu)))
                .unwrap_or_else(|_| Err("panicked".into()));
        match result {
            Ok(()) => {
                passed += 1;
                println!(
                    "test {name} ... ok ({:.1} ms)",
                    t0.elapsed().as_secs_f64() * 1e3
                );
            }
            Err(e) if e.starts_with(SKIP) => {
                skipped += 1;
                println!("test {name} ... {e}");
            }
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED: {e}");
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        std::process::exit(1);
    }
}
