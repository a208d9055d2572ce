//! `kart path`: the verified, decompressed cubin as a file, for other runtimes.

use std::process::ExitCode;

use kart::error::{Error, Result};
use kart::model::ArtifactKind;
use kart::model::{Config, ParamValue};
use kart::runtime::Blobs;
use kart::store::lockfile::describe;
use kart::store::lockindex::LockIndex;
use kart::target::TargetArch;
use kart::workspace::Workspace;

/// `kart path`.
pub fn run(
    ws: Workspace,
    kernel: &str,
    params: &[(String, ParamValue)],
    target: Option<TargetArch>,
    json: bool,
) -> Result<ExitCode> {
    let config = params.iter().cloned().collect::<Config>();
    let artifact = match target {
        // One record: read without parsing the whole lock.
        Some(t) => match read_lock(&ws)? {
            Some(lock) => lock
                .find(kernel, &config, &t.to_string(), ArtifactKind::Cubin)?
                .cloned(),
            None => None,
        }
        .ok_or_else(|| Error::NotLoadable {
            message: format!(
                "kart.lock has no {}",
                describe(kernel, &config, &t.to_string(), ArtifactKind::Cubin)
            ),
            hint: Some(format!(
                "`kart ls` lists the artifacts; `kart build {kernel} --target {t}` adds one"
            )),
        })?,
        None => {
            let gpu = kart::runtime::Gpu::open(0).map_err(|e| match e {
                Error::Environment { message, .. } => {
                    Error::environment(message, "pass --target sm_XX to choose without a GPU")
                }
                other => other,
            })?;
            let lock = read_lock(&ws)?.unwrap_or_else(|| LockIndex::parsed(Default::default()));
            let rt = kart::runtime::Runtime::from_index(lock, Blobs::Store(ws.store));
            let a = rt
                .select(
                    kernel,
                    &config,
                    gpu.capability,
                    kart::resolve::JitPolicy::Forbid,
                )?
                .clone();
            let Some(store) = rt.store() else {
                return Err(Error::usage("a runtime over a bundle has no store", None));
            };
            return write_materialized(store, &a, json);
        }
    };
    write_materialized(&ws.store, &artifact, json)
}

/// The project's lock, indexed (records parsed when a lookup touches them).
fn read_lock(ws: &Workspace) -> Result<Option<LockIndex>> {
    LockIndex::read(
        &kart::store::lockfile::lock_path(&ws.project.root),
        std::path::Path::new(kart::store::lockfile::LOCK_FILE),
    )
}

fn write_materialized(
    store: &kart::store::Store,
    a: &kart::store::lockfile::LockedArtifact,
    json: bool,
) -> Result<ExitCode> {
    let path = store
        .materialized_dir()
        .join(format!("{}.{}", a.digest, a.kind));
    let up_to_date = kart::digest::sha256_file(&path).is_ok_and(|d| d == a.digest);
    if !up_to_date {
        let bytes = store.read_blob(&a.digest, Some(a.size))?;
        kart::store::fsutil::write_atomic(&path, &bytes)?;
    }
    if json {
        let entries: Vec<serde_json::Value> = a
            .entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name,
                    "symbol": e.symbol(),
                    "instance": e.instance,
                })
            })
            .collect();
        super::output::print_json(&serde_json::json!({
            "path": path,
            "digest": a.digest,
            "target": a.target,
            "entries": entries,
        }));
    } else {
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
