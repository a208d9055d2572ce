//! The smoke kernel, shipped inside kart: the smallest proof that a toolchain (and, at
//! run time, a GPU) works end to end, paid once per toolchain before anything big.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, IoContext, Result};
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::pipeline::compile::{CompileJob, compile};
use crate::project::Kernel;
use crate::store::Store;
use crate::target::TargetArch;
use crate::toolchain::Toolchain;

/// The smoke kernel's source (the same file as `kernels/smoke/smoke.cu`).
pub const SMOKE_SOURCE: &str = include_str!("../../kernels/smoke/smoke.cu");

use crate::smoke::{SMOKE_ENTRY, SMOKE_SIGNATURE, launch_smoke};

/// How long the smoke compile may take: it is tiny, so a hang shows within a minute.
const SMOKE_TIMEOUT: Duration = Duration::from_secs(60);

/// The smoke kernel as a kernel rooted in a scratch folder.
pub fn smoke_kernel(targets: Vec<TargetArch>) -> Kernel {
    Kernel {
        name: "smoke".into(),
        dir: PathBuf::from("smoke"),
        manifest: PathBuf::from("smoke/kernel.toml"),
        sources: vec![PathBuf::from("smoke/smoke.cu")],
        include: vec![],
        entry: vec![SMOKE_ENTRY.into()],
        templates: Default::default(),
        param_macros: Default::default(),
        libraries: Vec::new(),
        targets,
        flags: vec!["-O3".into()],
        defines: Default::default(),
        defined: Default::default(),
        define_params: Default::default(),
        prelude: None,
        ptx: false,
        params: Default::default(),
        exclude: vec![],
        signature: [(SMOKE_ENTRY.to_string(), SMOKE_SIGNATURE.to_vec())].into(),
        default: None,
        tune: None,
        require: Vec::new(),
        derived: Vec::new(),
        launch: None,
        variant_of: None,
        declared_in_source: Default::default(),
        unmentioned: Default::default(),
        problem_params: Default::default(),
        problem_combos: Default::default(),
        launch_params: Default::default(),
        launch_params_found: Default::default(),
        prune: None,
        kept: Default::default(),
    }
}

/// Compiles the embedded smoke kernel for `target` and checks the cubin; returns the
/// cubin. Fails with nvcc's own message if the toolchain cannot.
pub fn compile_smoke_bytes(
    store: &Store,
    toolchain: &Toolchain,
    target: TargetArch,
) -> Result<(Vec<u8>, Duration)> {
    let scratch = store.scratch_dir()?;
    let dir = scratch.path().join("smoke");
    std::fs::create_dir_all(&dir).at("create folder", &dir)?;
    let source = dir.join("smoke.cu");
    std::fs::write(&source, SMOKE_SOURCE).at("write", &source)?;
    let kernel = smoke_kernel(vec![target]);
    let config = Config::default();
    let job = CompileJob {
        root: scratch.path(),
        toolchain,
        kernel: &kernel,
        config: &config,
        target,
        kind: ArtifactKind::Cubin,
        timeout: SMOKE_TIMEOUT,
    };
    let out = compile(&job, scratch.path()).map_err(|failure| {
        if failure.disk_full {
            return Error::Environment {
                message: failure.summary,
                hint: Some("free space on the store's disk (or move the store: `store` in kart.toml)".into()),
            };
        }
        Error::Environment {
            message: format!(
                "the toolchain cannot compile the smoke kernel for {target}, so it would fail on every kernel: {failure}"
            ),
            hint: Some(format!("{} (nvcc at `{}`)", crate::toolchain::SETUP_HINT, toolchain.nvcc.display())),
        }
    })?;
    Ok((out.bytes, out.elapsed))
}

/// The build's smoke gate: compile the smoke kernel once per toolchain and remember it.
pub fn compile_smoke(store: &Store, toolchain: &Toolchain, target: TargetArch) -> Result<Duration> {
    let (_, elapsed) = compile_smoke_bytes(store, toolchain, target)?;
    store.mark_smoke_passed(
        &toolchain.fingerprint,
        &format!(
            "nvcc {} compiled the smoke kernel for {target}\n",
            toolchain.release
        ),
    )?;
    Ok(elapsed)
}

/// One stage of `kart smoke`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SmokeStage {
    /// Stage name.
    pub stage: &'static str,
    /// Wall time, milliseconds.
    pub ms: f64,
    /// What it found.
    pub detail: String,
}

/// What `kart smoke` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SmokeReport {
    /// Stages in order.
    pub stages: Vec<SmokeStage>,
    /// The GPU, when there was one.
    pub gpu: Option<String>,
    /// True when the GPU stages were skipped for lack of a GPU.
    pub skipped_no_gpu: bool,
}

impl SmokeReport {
    fn stage<T>(
        &mut self,
        stage: &'static str,
        f: impl FnOnce() -> Result<(T, String)>,
    ) -> Result<T> {
        let t0 = std::time::Instant::now();
        let (value, detail) = f()?;
        self.stages.push(SmokeStage {
            stage,
            ms: t0.elapsed().as_secs_f64() * 1e3,
            detail,
        });
        Ok(value)
    }
}

/// The whole loop on the smoke kernel: toolchain, compile for this GPU's target (or
/// `fallback` without a GPU), store, re-read and verify, driver, load, resolve, launch
/// on random data, compare with the CPU. Without a GPU the GPU stages are skipped
/// (`skipped_no_gpu`).
pub fn run_smoke(
    store: &Store,
    nvcc: Option<&std::path::Path>,
    project_root: &std::path::Path,
    installed_nvcc: Option<std::path::PathBuf>,
    fallback: TargetArch,
) -> Result<SmokeReport> {
    use crate::runtime::Gpu;
    let mut report = SmokeReport::default();
    let toolchain = report.stage("toolchain", || {
        crate::toolchain::refuse_hostile_env()?;
        let path = crate::toolchain::find_nvcc(nvcc, project_root, installed_nvcc)?;
        let cache = crate::toolchain::stamp::CacheDirs::new(store.toolchain_cache_dir());
        let tc = Toolchain::load(&path, &cache)?;
        let detail = format!("nvcc {} at {}", tc.release, tc.nvcc.display());
        Ok((tc, detail))
    })?;
    let gpu = report.stage("driver", || match Gpu::open(0) {
        Ok(gpu) => {
            let detail = format!(
                "{} (compute capability {}), driver supports CUDA {}",
                gpu.name,
                gpu.capability,
                crate::resolve::format_cuda_version(gpu.driver_version)
            );
            Ok((Some(gpu), detail))
        }
        Err(e @ Error::Environment { .. }) => Ok((None, format!("{e}"))),
        Err(e) => Err(e),
    })?;
    let target = gpu.as_ref().map_or(fallback, |g| g.capability.target());
    let bytes = report.stage("compile", || {
        let (bytes, elapsed) = compile_smoke_bytes(store, &toolchain, target)?;
        let detail = format!(
            "{target}, {} bytes, nvcc {:.0} ms",
            bytes.len(),
            elapsed.as_secs_f64() * 1e3
        );
        Ok((bytes, detail))
    })?;
    let digest = report.stage("store", || {
        let digest = store.put_blob(&bytes)?;
        let detail = format!("blob {}", &digest[..16]);
        Ok((digest, detail))
    })?;
    let verified = report.stage("verify", || {
        let back = store.read_blob(&digest, Some(bytes.len() as u64))?;
        Ok((back, "re-read, decompressed, sha256 matches".to_string()))
    })?;
    let Some(gpu) = gpu else {
        report.skipped_no_gpu = true;
        return Ok(report);
    };
    report.gpu = Some(gpu.name.clone());
    let artifact = crate::store::lockfile::LockedArtifact {
        kernel: "smoke".into(),
        config: Config::default(),
        target: target.to_string(),
        kind: ArtifactKind::Cubin,
        key: digest.clone(),
        digest: digest.clone(),
        size: verified.len() as u64,
        nvcc: toolchain.release.clone(),
        entries: vec![crate::cubin::EntryInfo {
            name: SMOKE_ENTRY.into(),
            params: crate::cubin::param_sizes(&verified, SMOKE_ENTRY).unwrap_or_default(),
            signature: Some(SMOKE_SIGNATURE.to_vec()),
            ..Default::default()
        }],
        derived: Default::default(),
    };
    gpu.check_driver_floor(&artifact)?;
    let loaded = report.stage("load", || {
        let loaded = gpu.load_verified(artifact, verified, Duration::ZERO)?;
        let detail = format!(
            "cuModuleLoadData {:.0} µs, entry resolved and loaded {:.0} µs",
            loaded.timings.load.as_secs_f64() * 1e6,
            loaded.timings.resolve.as_secs_f64() * 1e6
        );
        Ok((loaded, detail))
    })?;
    report.stage("launch", || {
        let worst = launch_smoke(&gpu, &loaded, 1 << 20 | 3)?;
        Ok((
            (),
            format!("1048579 elements, max relative error {worst:.2e} against the CPU"),
        ))
    })?;
    Ok(report)
}
