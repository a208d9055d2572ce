//! `kart export --python`: one self-contained Python module holding selected cubins
//! (zlib, base64, each with its sha256) and a small ctypes loader over the CUDA driver,
//! so a Python program gets launchable kernels at import time without kart, nvcc,
//! NVRTC or any JIT. The loader's code is `export/loader.py`, verbatim; kart writes a
//! header above it and the data below it.
//!
//! The artifact records and the cubins are comment lines at the end of the module
//! (`#R KERNEL CONFIG<tab>RECORD`, then an index of them, then `#B BASE64`), at byte
//! offsets the code names (`_DATA_AT`, `_INDEX_AT`, `_BLOBS_AT`, each record's `blob`):
//! Python's compiler skips them and a `.pyc` does not hold them, so importing a module
//! of 10,000 configs builds nothing per artifact. The index has one fixed-width line
//! per record (`#I OFFSET LENGTH`, hex, the record line's place from `_DATA_AT`),
//! sorted by the record's `KERNEL CONFIG` key, so `load()` finds a config's records by
//! bisection (some 15 reads of a line), parsing only them; a cubin is read, decoded and
//! checked when its launcher is first called.

use std::collections::BTreeMap;
use std::io::Write;

use base64::Engine;
use serde_json::json;

use crate::deploy::tune::TuneFile;
use crate::error::{Error, Result};
use crate::model::ArtifactKind;
use crate::model::{Config, ParamValue};
use crate::project::Project;
use crate::store::Store;
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::target::TargetArch;

/// The line above the data: records, then cubins, read by the loader at the offsets
/// above it.
const DATA_MARK: &str = "# --- Data (read by the loader at _DATA_AT, _INDEX_AT and _BLOBS_AT; not code): one artifact\n# record a line (kernel, config, then the record as JSON), the records' index sorted by kernel and\n# config (offset and length of each record line, hex), then one cubin a line (zlib, base64).\n";

/// Bytes of one line of the records' index: `#I `, 12 hex digits of offset, a space, 8
/// of length, a newline (`_INDEX_ROW` in the loader).
const INDEX_ROW: usize = 25;

/// The loader, written into every exported module.
const LOADER: &str = include_str!("loader.py");

/// `KERNEL` or `KERNEL:NAME=VALUE,NAME=VALUE`: a kernel and, optionally, a partial
/// config (every config of the lock matching it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// The kernel.
    pub kernel: String,
    /// Params the configs must have.
    pub params: BTreeMap<String, ParamValue>,
}

impl std::str::FromStr for Selector {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Selector, String> {
        let (kernel, rest) = s.split_once(':').unwrap_or((s, ""));
        if !crate::untrusted::is_c_identifier(kernel) {
            return Err(format!(
                "`{s}`: write KERNEL or KERNEL:NAME=VALUE,NAME=VALUE"
            ));
        }
        let mut params = BTreeMap::new();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            let (name, value) = crate::model::parse_param(pair)?;
            params.insert(name, value);
        }
        Ok(Selector {
            kernel: kernel.to_string(),
            params,
        })
    }
}

/// What to export.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// Kernels and configs (default: every kernel of the lock).
    pub selectors: Vec<Selector>,
    /// Only cubins for these targets (default: every target of the lock).
    pub targets: Vec<TargetArch>,
    /// Every config of each selected kernel, not only the named or default ones.
    pub all_configs: bool,
}

/// The cubins of the lock to export: for each selected kernel, the named configs,
/// else every config with `all_configs`, else the tuned winners of `kart.tune` and the
/// kernel's `default` (or its only config); every cubin target unless `targets`
/// narrows them.
pub fn select<'a>(
    project: &Project,
    lock: &'a Lockfile,
    tune: &TuneFile,
    options: &ExportOptions,
) -> Result<Vec<&'a LockedArtifact>> {
    let mut selectors = options.selectors.clone();
    if selectors.is_empty() {
        let mut names: Vec<&str> = lock.artifacts.iter().map(|a| a.kernel.as_str()).collect();
        names.dedup();
        selectors = names
            .into_iter()
            .map(|k| Selector {
                kernel: k.to_string(),
                params: BTreeMap::new(),
            })
            .collect();
    }
    // A kernel named without params brings its variants (kernels whose `variant_of`
    // names it), so that best() in the module can choose among them; a variant with
    // nothing to export (no cubin for the asked targets) is left out quietly.
    let named: Vec<String> = selectors.iter().map(|s| s.kernel.clone()).collect();
    let mut implied = Vec::new();
    for selector in selectors.iter().filter(|s| s.params.is_empty()) {
        for variant in project.kernels.iter().filter(|k| {
            k.variant_of
                .as_ref()
                .is_some_and(|v| v.base == selector.kernel)
                && !named.contains(&k.name)
        }) {
            implied.push(variant.name.clone());
        }
    }
    let mut chosen: Vec<&LockedArtifact> = Vec::new();
    for name in implied {
        let variant = ExportOptions {
            selectors: vec![Selector {
                kernel: name,
                params: BTreeMap::new(),
            }],
            ..options.clone()
        };
        if let Ok(more) = select(project, lock, tune, &variant) {
            chosen.extend(more);
        }
    }
    let mut undecided: Vec<(String, usize)> = Vec::new();
    for selector in &selectors {
        let of_kernel: Vec<&LockedArtifact> = lock
            .artifacts
            .iter()
            .filter(|a| a.kernel == selector.kernel && a.kind == ArtifactKind::Cubin)
            .collect();
        if of_kernel.is_empty() {
            return Err(Error::usage(
                format!("kart.lock has no cubin of kernel `{}`", selector.kernel),
                Some(format!("run `kart build {}` first", selector.kernel)),
            ));
        }
        let mut configs: Vec<&Config> = of_kernel.iter().map(|a| &a.config).collect();
        configs.sort();
        configs.dedup();
        let wanted: Vec<&Config> = if !selector.params.is_empty() {
            configs
                .into_iter()
                .filter(|c| c.matches(&selector.params))
                .collect()
        } else if options.all_configs || configs.len() == 1 {
            configs
        } else {
            let default = project
                .kernels
                .iter()
                .find(|k| k.name == selector.kernel)
                .and_then(|k| k.default.as_ref());
            // The tuned winners (records whose artifact the lock still names) and the
            // default.
            let tuned: Vec<&Config> = tune
                .records
                .iter()
                .filter(|r| {
                    r.implementation() == selector.kernel
                        && lock
                            .artifacts
                            .iter()
                            .any(|a| a.digest == r.digest && a.config == r.config)
                })
                .map(|r| &r.config)
                .collect();
            match default {
                Some(d) => configs
                    .into_iter()
                    .filter(|c| *c == d || tuned.contains(c))
                    .collect(),
                None if !tuned.is_empty() => {
                    configs.into_iter().filter(|c| tuned.contains(c)).collect()
                }
                None => {
                    // Every such kernel is named at once, after the loop.
                    undecided.push((selector.kernel.clone(), configs.len()));
                    continue;
                }
            }
        };
        if wanted.is_empty() {
            return Err(Error::usage(
                format!(
                    "no config of `{}` in kart.lock matches {}",
                    selector.kernel,
                    Config::from(selector.params.clone())
                ),
                Some("`kart ls` lists the configs".into()),
            ));
        }
        let before = chosen.len();
        chosen.extend(of_kernel.into_iter().filter(|a| {
            wanted.contains(&&a.config)
                && (options.targets.is_empty()
                    || options.targets.iter().any(|t| t.to_string() == a.target))
        }));
        if chosen.len() == before {
            return Err(Error::usage(
                format!(
                    "kart.lock has no cubin of `{}` for {}",
                    selector.kernel,
                    options
                        .targets
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(format!(
                    "add the target to the kernel and run `kart build {}`",
                    selector.kernel
                )),
            ));
        }
    }
    if !undecided.is_empty() {
        let named: Vec<String> = undecided
            .iter()
            .map(|(kernel, n)| format!("`{kernel}` ({n} configs)"))
            .collect();
        return Err(Error::usage(
            format!(
                "{} kernel(s) without a `default` in kernel.toml and without tuning records, so which configs to export is not said: {}",
                undecided.len(),
                named.join(", ")
            ),
            Some(
                "name the configs (`KERNEL:NAME=VALUE,…`), pass --all-configs, or declare `default = { … }` in each kernel.toml".into(),
            ),
        ));
    }
    chosen.sort_by(|a, b| a.id().cmp(&b.id()));
    chosen.dedup_by(|a, b| a.id() == b.id());
    Ok(chosen)
}

/// The Python module's text: header, loader, and the selected cubins (read from the
/// store, verified, zlib-compressed, base64).
pub fn python_module(
    store: &Store,
    project: &Project,
    tune: &TuneFile,
    artifacts: &[&LockedArtifact],
    lock_sha256: &str,
    command: &str,
) -> Result<String> {
    let mut kernels: Vec<&str> = artifacts.iter().map(|a| a.kernel.as_str()).collect();
    kernels.dedup();
    // Data reaches the module only as JSON literals (also Python literals), never
    // spliced into code or the docstring: the kernel names (C identifiers, checked
    // when the lock was read) are listed in KERNELS and the command in EXPORTED_BY.
    let mut out = format!(
        r#""""CUDA kernels exported by kart {version} (KERNELS lists them).

Generated from kart.lock (LOCK_SHA256) by the command in EXPORTED_BY.
Do not edit; export again instead.

    import <this module> as kernels
    axpb = kernels.load("smoke")                   # a config's launcher: load(name, PARAM=value, ...)
    axpb(grid, block, x, y, 1.5, -0.25, n)         # torch tensors / CUDA arrays, ints, floats
    kernels.preload()                              # load everything now (before graph capture)

It needs only the CUDA driver (libcuda, through ctypes): no kart, no nvcc, no NVRTC, no
JIT. Nothing touches the GPU at import; each cubin is checked against its sha256 before
the driver sees it, then loaded once per CUDA context.
"""
"#,
        version = env!("CARGO_PKG_VERSION"),
    );
    out.push_str(LOADER);
    out.push_str(&format!(
        "\nKART_VERSION = {}\nLOCK_SHA256 = {}\nKERNELS = {}\nEXPORTED_BY = {}\n\n",
        json!(env!("CARGO_PKG_VERSION")),
        json!(lock_sha256),
        json!(kernels),
        json!(command),
    ));
    // Each distinct blob once, a line each: `#B ` and its base64, at `offset` from the
    // blobs' first line.
    let mut blobs: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut blob_lines = String::new();
    let mut records = String::new();
    // (key, offset, length) of each record line, for the index.
    let mut index: Vec<(String, usize, usize)> = Vec::with_capacity(artifacts.len());
    for a in artifacts {
        // A list, in the kernel's declared order: the first entry is `load()`'s default.
        let mut entries = Vec::new();
        for e in &a.entries {
            let mut info = serde_json::Map::new();
            info.insert("name".into(), json!(e.name));
            info.insert("params".into(), json!(e.params));
            if let Some(symbol) = &e.symbol {
                info.insert("symbol".into(), json!(symbol));
            }
            if let Some(instance) = &e.instance {
                info.insert("instance".into(), json!(instance));
            }
            if let Some(sig) = &e.signature {
                info.insert(
                    "signature".into(),
                    json!(sig.iter().map(|k| k.name()).collect::<Vec<_>>()),
                );
            }
            entries.push(serde_json::Value::Object(info));
        }
        if !blobs.contains_key(a.digest.as_str()) {
            let bytes = store.read_blob(&a.digest, Some(a.size))?;
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            let compressed = match z.write_all(&bytes) {
                Ok(()) => z.finish(),
                Err(e) => Err(e),
            }
            .map_err(|e| Error::usage(format!("cannot compress a cubin: {e}"), None))?;
            let text = base64::engine::general_purpose::STANDARD.encode(compressed);
            let at = blob_lines.len() as u64 + 3;
            blobs.insert(&a.digest, (at, text.len() as u64));
            blob_lines.push_str(&format!("#B {text}\n"));
        }
        let config = config_json(&a.config);
        let key = format!("{} {}", a.kernel, serde_json::Value::Object(config.clone()));
        let (at, len) = blobs[a.digest.as_str()];
        // serde_json escapes control characters: a record is one line, with no tab.
        let record = json!({
            "kernel": a.kernel,
            "config": config,
            "target": a.target,
            "sha256": a.digest,
            "size": a.size,
            "nvcc": a.nvcc,
            "entries": entries,
            "derived": a.derived,
            "blob": [at, len],
        });
        let line = format!("#R {key}\t{record}\n");
        index.push((key, records.len(), line.len()));
        records.push_str(&line);
    }
    // Sorted by the key's bytes, as Python compares them (`bytes` order).
    index.sort();
    let mut index_lines = String::with_capacity(index.len() * INDEX_ROW);
    for (_, at, len) in &index {
        if *at >= 1 << 48 || *len >= 1 << 32 {
            return Err(Error::usage(
                "the exported records exceed what the module's index addresses".to_string(),
                Some("export fewer configs per module".into()),
            ));
        }
        index_lines.push_str(&format!("#I {at:012x} {len:08x}\n"));
    }
    debug_assert_eq!(index_lines.len(), index.len() * INDEX_ROW);
    // [launch] of each exported kernel that declares one.
    out.push_str(
        "# kernel -> its [launch] geometry (kernel.toml), evaluated by launch().\n_LAUNCH = {\n",
    );
    for name in &kernels {
        if let Some(launch) = project
            .kernels
            .iter()
            .find(|k| k.name == *name)
            .and_then(|k| k.launch.as_ref())
        {
            out.push_str(&format!("    {}: {},\n", json!(name), json!(launch.text())));
        }
    }
    out.push_str("}\n\n");
    // For best(): each tuned kernel's exact and nearest keys and default, and the
    // records whose winning cubin is exported.
    out.push_str("# kernel -> how best() matches problems (kernel.toml [tune] and default).\n_TUNE_SPEC = {\n");
    for name in &kernels {
        let Some(kernel) = project.kernels.iter().find(|k| k.name == *name) else {
            continue;
        };
        let spec = kernel.tune.clone().unwrap_or_default();
        let mut record = json!({
            "exact": spec.exact,
            "nearest": spec.nearest,
            "default": kernel.default.as_ref().map(config_json).unwrap_or_default(),
        });
        // JSON's null is not Python: absent keys stay absent.
        if let Some(v) = &kernel.variant_of {
            record["variant_of"] = json!(v.base);
        }
        out.push_str(&format!("    {}: {record},\n", json!(name)));
    }
    out.push_str("}\n\n# Tuning records (kart.tune) of the exported cubins.\n_TUNING = [\n");
    for r in &tune.records {
        if artifacts
            .iter()
            .any(|a| a.digest == r.digest && a.config == r.config)
        {
            let mut record = json!({
                "kernel": r.kernel,
                "gpu": r.gpu,
                "problem": r.problem,
                "config": config_json(&r.config),
                "median_us": r.median_us,
            });
            if let Some(v) = &r.variant {
                record["variant"] = json!(v);
            }
            out.push_str(&format!("    {record},\n"));
        }
    }
    out.push_str("]\n\n");
    // Offsets of fixed width, so that the text before the data has its final length.
    let offsets = |data_at: usize, index_at: usize, blobs_at: usize| {
        format!(
            "_DATA_AT = 0x{data_at:016x}\n_INDEX_AT = 0x{index_at:016x}\n_BLOBS_AT = 0x{blobs_at:016x}\n{DATA_MARK}"
        )
    };
    let data_at = out.len() + offsets(0, 0, 0).len();
    let index_at = data_at + records.len();
    let blobs_at = index_at + index_lines.len();
    out.push_str(&offsets(data_at, index_at, blobs_at));
    debug_assert_eq!(out.len(), data_at);
    out.push_str(&records);
    out.push_str(&index_lines);
    out.push_str(&blob_lines);
    Ok(out)
}

/// A config as a JSON object (which is also a Python dict literal).
fn config_json(config: &Config) -> serde_json::Map<String, serde_json::Value> {
    config
        .iter()
        .map(|(k, v)| {
            let value = match v {
                ParamValue::Int(i) => json!(i),
                ParamValue::Ident(s) => json!(s),
            };
            (k.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exported loader's `tensor_map` takes the runtime's element type names.
    #[test]
    fn the_loader_knows_every_tensor_map_element_type() {
        for name in kart_runtime::runtime::tma::TmaType::NAMES {
            assert!(
                LOADER.contains(&format!("\"{name}\": (")),
                "{name} missing from loader.py's _TMA_TYPES"
            );
        }
    }

    #[test]
    fn selectors_parse() {
        let s: Selector = "fa:BLOCK_M=128,NUM_WARPS=4".parse().unwrap();
        assert_eq!(s.kernel, "fa");
        assert_eq!(s.params.len(), 2);
        assert_eq!("smoke".parse::<Selector>().unwrap().params.len(), 0);
        assert!("fa:BLOCK_M".parse::<Selector>().is_err());
        assert!("../x".parse::<Selector>().is_err());
    }
}
