//! Exported Python modules on the GPU: the repository's kernels through `tests/python`
//! checks (torch, CuPy, CUDA graphs, `torch.compile`, variants, two devices).

use kart::runtime::Gpu;

use crate::{Fixture, SKIP, TestResult, repo_root, run_kart};

/// Exports `selectors` of the repository's own kernels (its kart.lock and store) to a
/// module in a temporary folder and runs `script` on it.
pub(crate) fn repository_check(selectors: &[&str], script: &str, passed: &str) -> TestResult {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let module = dir.path().join("repo_kernels.py");
    let mut args = vec!["export", "--python", "-o", module.to_str().ok_or("path")?];
    args.extend_from_slice(selectors);
    let (code, out) = run_kart(&repo_root(), &args, &[]);
    if code != 0 {
        return Err(format!(
            "export of the repository's {selectors:?} failed: {out}"
        ));
    }
    run_python_check(script, &module, passed, &format!("{script} failed"))
}

/// `tests/python/gpu_sgemm.py`: the tuned SGEMM through best() and [launch].
pub(crate) fn python_repository_sgemm(_: &Fixture, _: &Gpu) -> TestResult {
    repository_check(
        &["sgemm"],
        "tests/python/gpu_sgemm.py",
        "all sgemm checks passed",
    )
}

/// `tests/python/gpu_flash_attn.py`: every FlashAttention config for sm_90 against
/// PyTorch's attention.
pub(crate) fn python_repository_flash_attn(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the check exports sm_90 cubins; this GPU is {}",
            gpu.capability
        ));
    }
    repository_check(
        &["flash_attn", "--all-configs", "--target", "sm_90"],
        "tests/python/gpu_flash_attn.py",
        "all FlashAttention checks passed",
    )
}

/// `tests/python/gpu_cute_gemm.py`: the CuTe Hopper GEMM with tensor maps and clusters.
pub(crate) fn python_repository_cute_gemm(_: &Fixture, gpu: &Gpu) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}cute_gemm is built for sm_90a; this GPU is {}",
            gpu.capability
        ));
    }
    repository_check(
        &["cute_gemm", "--all-configs"],
        "tests/python/gpu_cute_gemm.py",
        "all cute_gemm checks passed",
    )
}

/// `tests/python/gpu_two_devices.py`: launches refused on the wrong device; needs two
/// GPUs, and says it skipped on fewer.
pub(crate) fn python_two_devices(_: &Fixture, _: &Gpu) -> TestResult {
    if kart::runtime::device_count() < 2 {
        return Err(format!(
            "{SKIP}one GPU here; the check needs two (run on a machine with two)"
        ));
    }
    repository_check(
        &["smoke"],
        "tests/python/gpu_two_devices.py",
        "all two-device checks passed",
    )
}

pub(crate) fn python_export_launches_with_torch_and_cupy(f: &Fixture, _: &Gpu) -> TestResult {
    let module = f.dir.path().join("fixture_kernels.py");
    let (code, out) = run_kart(
        f.dir.path(),
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "scale:FACTOR=2,OFFSET=1",
            "smem",
            "old",
            "affine:UNROLL=2",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_export.py",
        &module,
        "all GPU checks passed",
        "the exported module failed on the GPU",
    )
}

/// Runs a Python check of an exported module, prints its output indented, and fails
/// unless it exits 0 and prints `passed`.
pub(crate) fn run_python_check(
    script: &str,
    module: &std::path::Path,
    passed: &str,
    failure: &str,
) -> TestResult {
    let output = std::process::Command::new("python3")
        .arg(repo_root().join(script))
        .arg(module)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("    {line}");
    }
    if !output.status.success() || !text.contains(passed) {
        return Err(failure.into());
    }
    Ok(())
}

/// The repository's smoke and FlashAttention kernels (FlashAttention's default config
/// for sm_90 only, to keep the build short) exported and run by
/// `tests/python/gpu_torch.py`: CUDA-graph capture and replay before and after
/// `preload()`, a launch-cost sanity bound, and `torch_op` under
/// `torch.compile(fullgraph=True)`, with and without CUDA graphs.
pub(crate) fn python_module_in_cuda_graphs_and_torch_compile(_: &Fixture, _: &Gpu) -> TestResult {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = repo_root();
    std::fs::write(
        dir.path().join("kart.toml"),
        "[project]\ntargets = [\"sm_90\"]\n[toolchain]\nnvcc = \"13.0\"\n",
    )
    .map_err(|e| e.to_string())?;
    for kernel in ["smoke", "flash_attn"] {
        let to = dir.path().join("kernels").join(kernel);
        std::fs::create_dir_all(&to).map_err(|e| e.to_string())?;
        // The kernel's files (its folder also holds results/, which a build never reads).
        for f in std::fs::read_dir(repo.join("kernels").join(kernel)).map_err(|e| e.to_string())? {
            let f = f.map_err(|e| e.to_string())?;
            if f.path().is_file() {
                std::fs::copy(f.path(), to.join(f.file_name())).map_err(|e| e.to_string())?;
            }
        }
    }
    let default = [
        "-p",
        "HEAD_DIM=64",
        "-p",
        "CAUSAL=0",
        "-p",
        "BLOCK_M=128",
        "-p",
        "BLOCK_N=64",
        "-p",
        "NUM_WARPS=4",
    ];
    let mut build = vec!["build", "-q", "--target", "sm_90", "flash_attn"];
    build.extend(default);
    for args in [&["build", "-q", "smoke"][..], &build[..]] {
        let (code, out) = run_kart(dir.path(), args, &[]);
        if code != 0 {
            return Err(format!("kart {args:?} failed: {out}"));
        }
    }
    let module = dir.path().join("bk.py");
    let (code, out) = run_kart(
        dir.path(),
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "smoke",
            "flash_attn",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_torch.py",
        &module,
        "all torch checks passed",
        "the exported module failed with CUDA graphs or torch.compile",
    )
}

/// `tests/python/gpu_variants.py` on the repository's own FlashAttention family,
/// exported from its lock and store.
pub(crate) fn python_variants_are_called_alike_and_chosen_by_best(
    _: &Fixture,
    gpu: &Gpu,
) -> TestResult {
    if gpu.capability.major != 9 {
        return Err(format!(
            "{SKIP}the family's Hopper variant runs on compute capability 9.0 only, not {}",
            gpu.capability
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let module = dir.path().join("fa.py");
    let repo = repo_root();
    let (code, out) = run_kart(
        &repo,
        &[
            "export",
            "--python",
            "-o",
            module.to_str().ok_or("path")?,
            "flash_attn",
            "--all-configs",
            "--target",
            "sm_90",
            "--target",
            "sm_90a",
        ],
        &[],
    );
    if code != 0 {
        return Err(format!("export failed: {out}"));
    }
    run_python_check(
        "tests/python/gpu_variants.py",
        &module,
        "all variant checks passed",
        "the exported FlashAttention family failed",
    )
}
