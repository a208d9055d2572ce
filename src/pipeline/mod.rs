//! `kart build`: plan every artifact, take what the store has, compile the rest in
//! parallel, write the lock. Also the `--locked` check and `explain`.

mod action_paths;
pub mod batch;
pub mod compile;
pub mod deps;
pub mod explain;
mod infeasible;
mod keep;
pub mod key;
mod lock_write;
mod locked;
mod options;
pub mod phases;
mod plan;
pub mod process;
mod prune;
pub mod ptx;
mod pull;
pub mod remote_exec;
mod reporter;
mod settled;
mod skip;
pub mod smoke;

use lock_write::write_lock;
pub use locked::explain_change;
use locked::{check_locked, digest_mismatch_error};
pub use options::{BuildOptions, BuildSummary, Shard};
pub use plan::{Planned, Selection};
pub use reporter::BuildReporter;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::pipeline::compile::{CompileFailure, CompileJob, Runner, compile_on};
use crate::store::lockfile::{LockedArtifact, Lockfile};
use crate::store::{ActionEntry, ENTRY_FORMAT};
use crate::toolchain::Toolchain;
use crate::workspace::Workspace;

/// Runs `kart build` in `workspace`.
pub fn build(
    ws: &Workspace,
    options: &BuildOptions,
    reporter: &dyn BuildReporter,
) -> Result<BuildSummary> {
    let toolchain = ws.toolchain(options.nvcc.as_deref())?;
    let whole = options.selection.kernels.is_empty()
        && options.selection.params.is_empty()
        && options.selection.targets.is_empty();
    // A whole-project build that changes nothing, with the same inputs, lock and store
    // as the last one found in agreement, has nothing to find out.
    let probe = (whole && options.shard.is_none() && !options.push)
        .then(|| settled::Probe::new(ws, &toolchain))
        .flatten();
    if let Some(artifacts) = probe
        .as_ref()
        .and_then(|p| p.matches(&crate::store::lockfile::lock_path(&ws.project.root)))
    {
        reporter.planned(artifacts, 0);
        return Ok(BuildSummary {
            selected: artifacts,
            from_store: if options.locked { 0 } else { artifacts },
            lock_entries: (artifacts, artifacts),
            digests_matched: if options.locked { artifacts } else { 0 },
            ..BuildSummary::default()
        });
    }
    let planned = ws.plan(&toolchain)?;
    let mut selected = ws.select(&planned, &options.selection)?;
    toolchain.require_libraries(selected.iter().map(|p| &ws.project.kernels[p.kernel]))?;
    if options.locked {
        let digests = check_locked(ws, &toolchain, &selected, whole, options.remote.as_deref())?;
        return Ok(BuildSummary {
            selected: selected.len(),
            digests_matched: digests.matched,
            digests_unchecked: digests.unchecked,
            ..BuildSummary::default()
        });
    }
    if let Some(shard) = options.shard {
        // Round-robin over the sorted selection: balanced, and the same on every machine.
        selected = selected
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % shard.count == shard.index - 1)
            .map(|(_, p)| p)
            .collect();
    }

    let old_lock = ws.lock()?;
    let by_key: std::collections::HashMap<&str, &LockedArtifact> = old_lock
        .artifacts
        .iter()
        .map(|a| (a.key.as_str(), a))
        .collect();
    // The lock is the trust root: an artifact it lists with this key, whose blob is
    // here (fetched, say), needs no compile even without a local action entry. Asked
    // first: it costs a stat, where reading the action entry costs a parse.
    let locked_here = |p: &Planned| {
        by_key
            .get(p.key.as_str())
            .is_some_and(|a| ws.store.has_blob(&a.digest))
    };
    let mut to_compile = Vec::new();
    let mut from_store = 0;
    // Configs that differ only in launch-only params share a key: compiled once.
    let mut keys_to_compile = std::collections::HashSet::new();
    let mut shared = 0;
    // An artifact the old lock records as pruned, of a config the bounds still prune,
    // needs no blob: its recorded resources decide.
    let recorded_pruned: std::collections::HashMap<&str, _> = old_lock
        .pruned
        .iter()
        .map(|p| (p.key.as_str(), p.resources()))
        .collect();
    let still_pruned = if recorded_pruned.is_empty() {
        prune::Pruning::default()
    } else {
        prune::decide(ws, &planned, &|p| {
            recorded_pruned.get(p.key.as_str()).copied()
        })
    };
    for p in &selected {
        if locked_here(p)
            || ws.stored_entry(&p.key, reporter).is_some()
            || (still_pruned.contains(p) && recorded_pruned.contains_key(p.key.as_str()))
        {
            from_store += 1;
        } else if !keys_to_compile.insert(p.key.as_str()) {
            shared += 1;
        } else {
            to_compile.push(*p);
        }
    }
    let mut pulled = pull::Pulled::default();
    if let Some(remote) = &options.remote
        && !to_compile.is_empty()
    {
        let wanted: Vec<pull::Wanted<'_>> = to_compile
            .iter()
            .map(|p| pull::Wanted {
                key: &p.key,
                kernel: &ws.project.kernels[p.kernel].name,
                config: &p.config,
                target: p.target.to_string(),
                kind: p.kind,
            })
            .collect();
        pulled = pull::pull_missing(
            &ws.store,
            remote,
            &wanted,
            &old_lock,
            options.entries_only,
            &|message| reporter.note(message),
        );
        to_compile.retain(|p| !pulled.entries.contains_key(&p.key) && !locked_here(p));
    }
    let from_remote = selected.len() - from_store - shared - to_compile.len();
    reporter.planned(selected.len(), to_compile.len());

    if !to_compile.is_empty() && !ws.store.smoke_passed(&toolchain.fingerprint) {
        let target = to_compile[0].target;
        let elapsed = smoke::compile_smoke(&ws.store, &toolchain, target)?;
        reporter.note(&format!(
            "smoke kernel compiled for {target} in {:.2} s: toolchain nvcc {} works",
            elapsed.as_secs_f64(),
            toolchain.release
        ));
    }

    let (failed_count, mut failures, over_limits, executor) =
        compile_all(ws, &toolchain, &to_compile, &old_lock, options, reporter);
    let compiled = to_compile.len() - failed_count;
    let exclusions = infeasible::exclusions(ws, &over_limits);
    let mut planned_kept: Vec<Planned> = Vec::new();
    let mut excluded_infeasible = 0;
    if options.skip_infeasible
        && options.shard.is_none()
        && !over_limits.is_empty()
        && over_limits.len() == failed_count
    {
        // Only configs over a limit failed: record why in each kernel.toml, lock the rest.
        (planned_kept, excluded_infeasible) =
            skip::exclude(ws, &exclusions, &planned, &mut selected, reporter)?;
        failures.clear();
    } else {
        failures.extend(infeasible::advice(ws, &exclusions));
    }
    let planned: &[Planned] = if excluded_infeasible > 0 {
        &planned_kept
    } else {
        &planned
    };
    // `[prune]`: configs whose artifacts exceed a bound leave the plan whole.
    let pruning = prune::after_compile(ws, planned, &old_lock, &pulled.entries);
    let unpruned: Vec<Planned>;
    let planned: &[Planned] = if pruning.is_empty() {
        planned
    } else {
        let kernels = selected.iter().map(|p| p.kernel).collect();
        for note in pruning.notes(ws, &kernels) {
            reporter.note(&note);
        }
        unpruned = planned
            .iter()
            .filter(|p| !pruning.contains(p))
            .cloned()
            .collect();
        &unpruned
    };

    let mut summary = BuildSummary {
        selected: selected.len(),
        from_store,
        from_remote,
        downloaded: pulled.blobs,
        compiled,
        executor,
        excluded_infeasible,
        shared_compiles: shared,
        pruned: selected.iter().filter(|p| pruning.contains(p)).count(),
        ..BuildSummary::default()
    };
    if options.push
        && let Some(remote) = &options.remote
    {
        let entries: Vec<ActionEntry> = selected
            .iter()
            .filter_map(|p| ws.stored_entry(&p.key, reporter))
            .collect();
        let items: Vec<crate::remote::transfer::Pushed<'_>> = entries
            .iter()
            .map(|e| crate::remote::transfer::Pushed {
                key: &e.key,
                digest: &e.digest,
                size: e.size,
            })
            .collect();
        let report = crate::remote::transfer::push_items(
            &ws.store,
            remote.as_ref(),
            &items,
            &crate::pool::Silent,
        )?;
        summary.pushed = report.blobs_uploaded;
    }
    let mut mismatches = Vec::new();
    // A build with a failure leaves the lock as it was: what did compile is in the
    // store, and the next build takes it from there in milliseconds.
    if options.shard.is_none() && failures.is_empty() {
        let built: std::collections::HashSet<&str> =
            selected.iter().map(|p| p.key.as_str()).collect();
        // What the lock names reaches the disk before the lock does.
        ws.store.sync_folders();
        let (listed, changed, agreed) = write_lock(
            ws,
            planned,
            &built,
            &pulled.entries,
            pruning.records,
            &old_lock,
            &mut mismatches,
            reporter,
        )?;
        summary.lock_changed = changed;
        summary.lock_entries = (listed, planned.len());
        // Settled: nothing compiled or fetched, every artifact in the store, and every
        // record unchanged and in agreement with its action entry.
        if let Some(probe) = &probe {
            if to_compile.is_empty()
                && from_remote == 0
                && !changed
                && mismatches.is_empty()
                && agreed == planned.len()
                && listed == planned.len()
            {
                probe.record(
                    &crate::store::lockfile::lock_path(&ws.project.root),
                    planned.len(),
                );
            } else {
                probe.forget();
            }
        }
    }
    if !mismatches.is_empty() {
        return Err(digest_mismatch_error(&mismatches));
    }
    if !failures.is_empty() {
        return Err(Error::BuildFailed {
            count: failed_count,
            failed: failures,
            total: selected.len(),
        });
    }
    Ok(summary)
}

/// What [`compile_all`] returns: how many failed, one line per distinct error with the
/// artifacts it hit, those over a resource limit (with why), and what the executor did.
type Compiled<'a> = (
    usize,
    Vec<String>,
    Vec<(&'a Planned, String)>,
    Option<remote_exec::ExecStats>,
);

/// Compiles `jobs` on `options.jobs` threads (on the executor, if any).
fn compile_all<'a>(
    ws: &Workspace,
    toolchain: &Toolchain,
    jobs: &[&'a Planned],
    old_lock: &Lockfile,
    options: &BuildOptions,
    reporter: &dyn BuildReporter,
) -> Compiled<'a> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let skipped = AtomicUsize::new(0);
    let host_compiler = toolchain.host_compiler();
    let past = past_compile_times(ws, old_lock, jobs);
    let batches = batches(ws, toolchain, jobs, &past, options);
    let note = |message: &str| reporter.note(message);
    let remote = options
        .executor
        .clone()
        .map(|executor| remote_exec::RemoteRunner::new(executor, &note));
    let runner: &dyn Runner = match &remote {
        Some(remote) => remote,
        None => &crate::pipeline::compile::Local,
    };
    let outcomes = crate::pool::parallel_map(&batches, options.jobs, |batch| {
        if stop.load(Ordering::Relaxed) {
            skipped.fetch_add(batch.len(), Ordering::Relaxed);
            return Vec::new();
        }
        let results = compile_batch_or_each(
            ws,
            toolchain,
            batch,
            options,
            &host_compiler,
            &stop,
            reporter,
            runner,
        );
        let mut failed = Vec::new();
        for (p, result) in batch.iter().zip(results) {
            let name = p.describe(&ws.project);
            match result {
                None => {
                    skipped.fetch_add(1, Ordering::Relaxed);
                }
                Some(Ok(elapsed)) => reporter.compiled(&name, Ok(elapsed)),
                Some(Err(failure)) => {
                    if options.fail_fast {
                        stop.store(true, Ordering::Relaxed);
                    }
                    reporter.compiled(&name, Err(&failure));
                    let infeasible = failure.group.starts_with(infeasible::GROUP);
                    let over = infeasible.then(|| (*p, failure.summary.clone()));
                    failed.push((name, failure.summary, over));
                }
            }
        }
        failed
    });
    // One line per distinct error, with the artifacts it hit.
    let mut by_error: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut over_limits: Vec<(&'a Planned, String)> = Vec::new();
    let mut failed_count = 0;
    for (name, summary, infeasible) in outcomes.into_iter().flatten() {
        failed_count += 1;
        by_error.entry(summary).or_default().push(name);
        over_limits.extend(infeasible);
    }
    let failures: Vec<String> = by_error
        .into_iter()
        .map(|(summary, mut names)| {
            names.sort();
            match names.as_slice() {
                [one] => format!("  {one}: {summary}"),
                _ => format!(
                    "  {summary}\n    in {} artifacts: {}",
                    names.len(),
                    names.join(", ")
                ),
            }
        })
        .collect();
    if let Some(remote) = &remote {
        let stats = remote.stats();
        let per = |ms: u64| ms as f64 / 1000.0 / stats.remote.max(1) as f64;
        reporter.note(&format!(
            "executor: {} compile step(s) ran remotely, {} here ({} after a failure of the executor); \
             uploaded {} blob(s), {:.1} MB; the toolkit's {} files ({:.0} MB) hashed in {:.2} s; \
             per remote step: {:.2} s to prepare and upload, {:.2} s queued, {:.2} s on a worker, \
             {:.2} s to download",
            stats.remote,
            stats.local,
            stats.fallbacks,
            stats.uploaded_blobs,
            stats.uploaded_bytes as f64 / 1e6,
            stats.toolkit_files,
            stats.toolkit_bytes as f64 / 1e6,
            stats.toolkit_hash_ms as f64 / 1000.0,
            per(stats.prepare_ms),
            per(stats.queued_ms),
            per(stats.worker_ms),
            per(stats.download_ms),
        ));
    }
    let skipped = skipped.into_inner();
    if skipped > 0 {
        reporter.note(&format!(
            "--fail-fast: {skipped} artifact(s) not compiled after the first failure"
        ));
    }
    (
        failed_count,
        failures,
        over_limits,
        remote.map(|r| r.stats()),
    )
}

/// Milliseconds per config that each kernel of `jobs` took to compile last time: the
/// mean `compile_ms` of the action entries of its artifacts in the previous lock (at
/// most 16 read per kernel; entries of format 2 have none).
fn past_compile_times(
    ws: &Workspace,
    old_lock: &Lockfile,
    jobs: &[&Planned],
) -> std::collections::HashMap<usize, u64> {
    let mut out = std::collections::HashMap::new();
    let kernels: std::collections::BTreeSet<usize> = jobs.iter().map(|p| p.kernel).collect();
    for k in kernels {
        let name = &ws.project.kernels[k].name;
        let times: Vec<u64> = old_lock
            .of_kernel(name)
            .iter()
            .take(16)
            .filter_map(|a| ws.store.get_entry(&a.key).ok().flatten())
            .filter_map(|e| e.compile_ms)
            .collect();
        if !times.is_empty() {
            out.insert(k, times.iter().sum::<u64>() / times.len() as u64);
        }
    }
    out
}

/// The compiles to run, in the order to start them: configs that may share a
/// front-end pass ([`batch::batch_key`]) in batches of `options.batch` (or of the size
/// kart chooses), the rest one by one; the longest first ([`longest_first`]), so a
/// build does not end on one core behind a slow compile.
fn batches<'a>(
    ws: &Workspace,
    toolchain: &Toolchain,
    jobs: &[&'a Planned],
    past: &std::collections::HashMap<usize, u64>,
    options: &BuildOptions,
) -> Vec<Vec<&'a Planned>> {
    let mut groups: Vec<(Option<String>, Vec<&'a Planned>)> = Vec::new();
    for p in jobs {
        let job = compile_job(ws, toolchain, p, options.timeout);
        let key = batch::batch_key(&job).filter(|_| options.batch != Some(1));
        match groups.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
            Some((_, members)) => members.push(p),
            None => groups.push((key, vec![p])),
        }
    }
    let mut out: Vec<(bool, Vec<&'a Planned>)> = Vec::new();
    for (key, members) in groups {
        if key.is_none() {
            out.extend(members.into_iter().map(|p| (false, vec![p])));
            continue;
        }
        let size = options
            .batch
            .unwrap_or_else(|| {
                batch::auto_size(members.len(), options.jobs, batch::available_memory())
            })
            .max(1);
        out.extend(members.chunks(size).map(|c| (true, c.to_vec())));
    }
    let estimated = out
        .into_iter()
        .map(|(template, b)| {
            let per_config = b.first().and_then(|p| past.get(&p.kernel)).copied();
            (template, per_config.map(|ms| ms * b.len() as u64), b)
        })
        .collect();
    longest_first(estimated)
}

/// Orders compiles by their expected time, longest first: the time the kernel's
/// configs took last time, where known; a compile with no record of its kernel goes
/// first if it is a template batch (the slow kind) and last otherwise. Stable: equal
/// estimates keep the plan's order.
fn longest_first<T>(compiles: Vec<(bool, Option<u64>, T)>) -> Vec<T> {
    let mut compiles = compiles;
    compiles.sort_by_key(|(template, estimate, _)| {
        std::cmp::Reverse(estimate.unwrap_or(if *template { u64::MAX } else { 0 }))
    });
    compiles.into_iter().map(|(_, _, c)| c).collect()
}

/// Compiles one batch: through one front-end pass when it holds several configs,
/// falling back to each config alone if that fails. One result per member, `None` for
/// a member not compiled because `stop` was set (`--fail-fast`).
#[allow(clippy::too_many_arguments)]
fn compile_batch_or_each(
    ws: &Workspace,
    toolchain: &Toolchain,
    batch: &[&Planned],
    options: &BuildOptions,
    host_compiler: &str,
    stop: &std::sync::atomic::AtomicBool,
    reporter: &dyn BuildReporter,
    runner: &dyn Runner,
) -> Vec<Option<std::result::Result<Duration, CompileFailure>>> {
    if batch.len() > 1
        && let Ok(scratch) = ws.store.scratch_dir()
    {
        let jobs: Vec<CompileJob<'_>> = batch
            .iter()
            .map(|p| compile_job(ws, toolchain, p, options.timeout))
            .collect();
        for p in batch {
            crate::failpoint::hit("build.compile", &p.key);
        }
        match batch::compile_batch_on(&jobs, scratch.path(), runner) {
            Ok(results) => {
                let mut out = Vec::new();
                for (p, result) in batch.iter().zip(results) {
                    out.push(Some(match result {
                        Ok(compiled) => store_output(ws, toolchain, p, compiled, host_compiler),
                        // Over a resource limit: the same alone, so not compiled again.
                        Err(why) if why.group.starts_with(infeasible::GROUP) => Err(why),
                        // Cut out of the batch but failing its checks: alone, it is
                        // reported with nvcc's own output (and kept with --keep-temps).
                        Err(why) => {
                            reporter.note(&format!(
                                "{}: compiled alone: {}",
                                p.describe(&ws.project),
                                why.summary
                            ));
                            compile_one(
                                ws,
                                toolchain,
                                p,
                                options.timeout,
                                host_compiler,
                                options.keep_temps,
                                runner,
                            )
                        }
                    }));
                }
                return out;
            }
            Err(batch::BatchFailure::Shared(failure)) => {
                return batch.iter().map(|_| Some(Err(failure.clone()))).collect();
            }
            Err(batch::BatchFailure::Retry(why)) => reporter.note(&format!(
                "a batch of {} configs of `{}` is compiled config by config: {why}",
                batch.len(),
                ws.project.kernels[batch[0].kernel].name
            )),
        }
    }
    batch
        .iter()
        .map(|p| {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            Some(compile_one(
                ws,
                toolchain,
                p,
                options.timeout,
                host_compiler,
                options.keep_temps,
                runner,
            ))
        })
        .collect()
}

/// What to compile for a planned artifact.
fn compile_job<'a>(
    ws: &'a Workspace,
    toolchain: &'a Toolchain,
    p: &'a Planned,
    timeout: Duration,
) -> CompileJob<'a> {
    CompileJob {
        root: &ws.project.root,
        toolchain,
        kernel: &ws.project.kernels[p.kernel],
        config: &p.config,
        target: p.target,
        kind: p.kind,
        timeout,
    }
}

fn compile_one(
    ws: &Workspace,
    toolchain: &Toolchain,
    p: &Planned,
    timeout: Duration,
    host_compiler: &str,
    keep_temps: bool,
    runner: &dyn Runner,
) -> std::result::Result<Duration, CompileFailure> {
    let scratch = ws.store.scratch_dir().map_err(store_failure)?;
    let job = compile_job(ws, toolchain, p, timeout);
    crate::failpoint::hit("build.compile", &p.key);
    let out = match compile_on(&job, scratch.path(), runner) {
        Ok(out) => out,
        Err(mut failure) if keep_temps => {
            match keep::keep_scratch(ws, &job, &p.key, scratch, &failure) {
                Ok(kept) => failure.details.push_str(&format!(
                    "\n  kept in {}: the files nvcc read and wrote, nvcc.sh (its command line), output.txt",
                    kept.display()
                )),
                Err(e) => failure
                    .details
                    .push_str(&format!("\n  --keep-temps: {}", e.with_causes())),
            }
            return Err(failure);
        }
        Err(failure) => return Err(failure),
    };
    store_output(ws, toolchain, p, out, host_compiler)
}

/// A failure of the store while keeping a compile's output.
fn store_failure(e: Error) -> CompileFailure {
    CompileFailure {
        summary: format!("store: {}", e.with_causes()),
        details: String::new(),
        disk_full: false,
        group: String::new(),
    }
}

/// Puts a compiled artifact's blob, then its action entry, into the store.
fn store_output(
    ws: &Workspace,
    toolchain: &Toolchain,
    p: &Planned,
    out: crate::pipeline::compile::CompileOutput,
    host_compiler: &str,
) -> std::result::Result<Duration, CompileFailure> {
    let kernel = &ws.project.kernels[p.kernel];
    let digest = ws.store.put_blob(&out.bytes).map_err(store_failure)?;
    crate::failpoint::hit("build.after-blob", &p.key);
    let entry = ActionEntry {
        format: ENTRY_FORMAT,
        key: p.key.clone(),
        kernel: kernel.name.clone(),
        config: p.config.clone(),
        target: p.target.to_string(),
        kind: p.kind,
        digest,
        size: out.bytes.len() as u64,
        entries: out.entries,
        nvcc_release: toolchain.release.clone(),
        host_compiler: host_compiler.to_string(),
        stderr: out.stderr,
        preimage: p.preimage(ws, toolchain).map_err(store_failure)?,
        compile_ms: Some(out.elapsed.as_millis().min(u128::from(u64::MAX)) as u64),
    };
    ws.store.put_entry(&entry).map_err(store_failure)?;
    Ok(out.elapsed)
}

#[cfg(test)]
mod tests {
    use super::longest_first;

    #[test]
    fn compiles_start_longest_first_and_unknown_template_batches_before_all() {
        let order = longest_first(vec![
            (false, Some(700), "sgemm"),
            (true, Some(9_000), "cute batch, known"),
            (false, None, "new extern C kernel"),
            (true, None, "new template batch"),
            (false, Some(4_000), "slow extern C"),
            (false, Some(700), "sgemm, second"),
        ]);
        assert_eq!(
            order,
            [
                "new template batch",
                "cute batch, known",
                "slow extern C",
                "sgemm",
                "sgemm, second",
                "new extern C kernel"
            ]
        );
    }
}
