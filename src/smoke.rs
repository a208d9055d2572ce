//! The smoke kernel, shipped inside kart: the smallest proof that a toolchain (and, at
//! run time, a GPU) works end to end, paid once per toolchain before anything big.

use std::path::PathBuf;
use std::time::Duration;

use crate::compile::{CompileJob, compile};
use crate::error::{Error, IoContext, Result};
use crate::key::ArtifactKind;
use crate::manifest::{Config, Kernel};
use crate::store::Store;
use crate::target::TargetArch;
use crate::toolchain::Toolchain;

/// The smoke kernel's source (the same file as `kernels/smoke/smoke.cu`).
pub const SMOKE_SOURCE: &str = include_str!("../kernels/smoke/smoke.cu");

/// Its one entry point: `y[i] = a * x[i] + b`.
pub const SMOKE_ENTRY: &str = "kart_smoke_axpb";

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
        targets,
        flags: vec!["-O3".into()],
        defines: Default::default(),
        ptx: false,
        params: Default::default(),
        exclude: vec![],
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
    let out = compile(&job, scratch.path()).map_err(|failure| Error::Environment {
        message: format!(
            "the toolchain cannot compile the smoke kernel for {target}, so it would fail on every kernel: {failure}"
        ),
        hint: Some(format!("{} (nvcc at `{}`)", crate::toolchain::SETUP_HINT, toolchain.nvcc.display())),
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
