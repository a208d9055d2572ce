//! `kart build --keep-temps`: a failing compile's folder kept for inspection, with
//! nvcc's command line as a script that runs it again.

use std::path::PathBuf;

use crate::error::Result;
use crate::pipeline::compile::{CompileFailure, CompileJob};
use crate::workspace::Workspace;

/// Moves a failed compile's scratch folder to `<store root>/kept/<kernel>-<key prefix>`
/// (replacing an older one of the same artifact) with nvcc's command line as a script
/// that runs it again from the project root, and nvcc's output.
pub(super) fn keep_scratch(
    ws: &Workspace,
    job: &CompileJob<'_>,
    key: &str,
    scratch: tempfile::TempDir,
    failure: &CompileFailure,
) -> Result<PathBuf> {
    use crate::error::IoContext as _;
    let kept_dir = ws.store.root().join("kept");
    std::fs::create_dir_all(&kept_dir).at("create", &kept_dir)?;
    let kept = kept_dir.join(format!("{}-{}", job.kernel.name, &key[..12]));
    if kept.exists() {
        std::fs::remove_dir_all(&kept).at("remove", &kept)?;
    }
    let from = scratch.keep();
    std::fs::rename(&from, &kept).at("move a scratch folder to", &kept)?;
    let main = crate::pipeline::compile::main_file(job, &kept);
    let ext = match job.kind {
        crate::model::ArtifactKind::Cubin => "cubin",
        crate::model::ArtifactKind::Ptx => "ptx",
    };
    let args = crate::pipeline::compile::nvcc_args(
        job,
        &main,
        &kept.join(format!("out.{ext}")),
        &kept.join("out.d"),
    )?;
    let quoted: Vec<String> = std::iter::once(job.toolchain.nvcc.display().to_string())
        .chain(args)
        .map(|a| shell_quote(&a))
        .collect();
    let script = format!(
        "#!/bin/sh\n# {} as kart compiled it; run from anywhere.\ncd {} || exit\nexec {}\n",
        crate::untrusted::for_terminal(&format!(
            "{}[{}] {}",
            job.kernel.name, job.config, job.target
        )),
        shell_quote(&job.root.display().to_string()),
        quoted.join(" ")
    );
    let script_path = kept.join("nvcc.sh");
    std::fs::write(&script_path, script).at("write", &script_path)?;
    let output = kept.join("output.txt");
    std::fs::write(&output, failure.to_string()).at("write", &output)?;
    Ok(kept)
}

/// `text` as one POSIX shell word.
fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./,:+@%".contains(c))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}
