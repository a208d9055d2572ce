//! `kart explain`: an artifact's action key with every input of it, and how it
//! compares with the lock (and, where the old key's inputs are known, what changed).

use std::path::Path;

use serde::Serialize;

use crate::digest::Preimage;
use crate::error::{Error, Result};
use crate::model::{ArtifactKind, Config};
use crate::pipeline::explain_change;
use crate::pipeline::key::{action_key, action_preimage, kernel_input_files};
use crate::store::lockfile::describe;
use crate::target::TargetArch;
use crate::workspace::Workspace;

/// What `explain` found.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// `kernel[config] target kind`.
    pub artifact: String,
    /// The action key.
    pub key: String,
    /// Every input of the key, in order.
    #[serde(serialize_with = "inputs")]
    pub inputs: Preimage,
    /// The lock's verdict, in words.
    pub lock: String,
    /// What changed against the locked key's inputs (empty when nothing or unknown).
    pub changes: Vec<String>,
    /// Template entries: the instance of this config, and its symbol once built.
    pub templates: Vec<TemplateInstance>,
}

/// A template entry's instance for the explained config.
#[derive(Debug, Serialize)]
pub struct TemplateInstance {
    /// The entry's name.
    pub entry: String,
    /// As kernel.toml writes it (`gemm<BM, BN>`).
    pub written: String,
    /// For this config (`gemm<128, 64>`).
    pub instance: String,
    /// Its mangled symbol, when the locked artifact has this key.
    pub symbol: Option<String>,
}

fn inputs<S: serde::Serializer>(p: &Preimage, s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(p.0.len()))?;
    for (name, value) in &p.0 {
        seq.serialize_element(&serde_json::json!({"name": name, "value": value}))?;
    }
    seq.end()
}

/// Explains the artifact of `kernel_name` with `config` (one value per param) for
/// `target` (default: the kernel's first) and `kind`.
pub fn explain(
    ws: &Workspace,
    nvcc: Option<&Path>,
    kernel_name: &str,
    config: &Config,
    target: Option<TargetArch>,
    kind: ArtifactKind,
) -> Result<Explanation> {
    let kernel = ws.project.kernel(kernel_name)?;
    let missing: Vec<&str> = kernel
        .params
        .keys()
        .filter(|k| !config.contains_key(k))
        .map(String::as_str)
        .collect();
    let unknown: Vec<&str> = config
        .keys()
        .filter(|k| !kernel.params.contains_key(*k))
        .collect();
    if !missing.is_empty() || !unknown.is_empty() {
        let list = |items: &[&str]| {
            if items.is_empty() {
                "none".to_string()
            } else {
                items.join(", ")
            }
        };
        let guesses: Vec<String> = unknown
            .iter()
            .filter_map(|u| {
                crate::suggest::did_you_mean(u, kernel.params.keys().map(String::as_str))
            })
            .collect();
        return Err(Error::usage(
            format!("explain needs one value for each param of `{kernel_name}`"),
            Some(format!(
                "missing: {}; unknown: {}{}; params: {}",
                list(&missing),
                list(&unknown),
                if guesses.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", guesses.join(", "))
                },
                kernel.params.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        ));
    }
    if !kernel.configs()?.contains(config) {
        return Err(Error::usage(
            format!("{config} is not a config of `{kernel_name}`"),
            kernel.grid().why_none(&config.to_map()),
        ));
    }
    let target = target.unwrap_or(kernel.targets[0]);
    let toolchain = ws.toolchain(nvcc)?;
    toolchain.require_libraries([kernel])?;
    let files = kernel_input_files(&ws.project.root, kernel)?;
    let preimage = action_preimage(
        &ws.project.root,
        &toolchain,
        kernel,
        config,
        target,
        kind,
        &files,
    )?;
    let key = action_key(&preimage);
    let lock = ws.lock()?;
    let locked = lock.find(kernel_name, config, &target.to_string(), kind);
    let (verdict, changes) = match locked {
        None => ("not in kart.lock".to_string(), Vec::new()),
        Some(a) if a.key == key => (format!("matches kart.lock (blob {})", a.digest), Vec::new()),
        Some(a) => (
            format!("differs from kart.lock (locked key {})", a.key),
            explain_change(ws, &a.key, &preimage),
        ),
    };
    let templates = kernel
        .template_instances(config)?
        .into_iter()
        .map(|(t, instance)| TemplateInstance {
            entry: t.name.clone(),
            written: t.written.clone(),
            instance,
            symbol: locked
                .filter(|a| a.key == key)
                .and_then(|a| a.entries.iter().find(|e| e.name == t.name))
                .and_then(|e| e.symbol.clone()),
        })
        .collect();
    Ok(Explanation {
        artifact: describe(kernel_name, config, &target.to_string(), kind),
        key,
        inputs: preimage,
        lock: verdict,
        changes,
        templates,
    })
}
