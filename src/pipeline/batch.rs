//! Several configs of one kernel through one front-end pass. For a CuTe/CUTLASS kernel
//! most of a compile is `cicc` parsing and instantiating the headers, the same for
//! every config; `ptxas` is a small part. A batch writes one unit instantiating every
//! config's template entries, runs nvcc once to PTX, cuts each config's module out of
//! it ([`super::ptx::split`]) and runs `ptxas` per config with the arguments nvcc
//! itself would pass (read from `nvcc --dryrun`, asked once per kernel, target and
//! command line in a process: `DRYRUNS`). Each config's cubin is then the one a
//! compile of that config alone makes, byte for byte: the bytes do not depend on which
//! configs shared the pass (checked by a test and by `kart verify --rebuild`, which
//! compiles configs alone).
//!
//! Only cubins of kernels with template entries batch, and only configs whose command
//! lines are the same but for the instances (the same macros: `param_macros = "auto"`
//! passes none of the params a template entry takes or no source mentions).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::model::ArtifactKind;
use crate::pipeline::compile::{
    CompileFailure, CompileJob, CompileOutput, INSTANCES_FILE, Local, Run, Runner, Tool, finish,
    frame, nvcc_args, without_scratch,
};
use crate::pipeline::deps::{check_dependencies, parse_depfile};
use crate::pipeline::phases;
use crate::pipeline::process::run_with_timeout;
use crate::project::entry::{find_symbols, plain_symbol, qualified_values, translation_unit};

/// The most configs one batch holds when kart chooses: past this a batch saves little
/// more per config (the front end's fixed cost is shared already) and holds the
/// machine's memory and a core longer.
pub const MAX_BATCH: usize = 8;

/// Jobs with the same key can share a front-end pass; `None`: this one compiles alone.
pub fn batch_key(job: &CompileJob<'_>) -> Option<String> {
    if job.kind != ArtifactKind::Cubin || job.kernel.templates.is_empty() {
        return None;
    }
    let templates: Vec<_> = job.kernel.templates.values().collect();
    Some(format!(
        "{}\n{}\n{:?}\n{:?}\n{:?}",
        job.kernel.name,
        job.target,
        job.kernel.macro_params(job.config).ok()?,
        job.kernel.bare_macros(job.config),
        qualified_values(&templates, &job.kernel.param_texts(job.config).ok()?)
    ))
}

/// What one more config adds to a front-end pass's memory, about: `cicc` held 1.5 GB
/// for five CuTe GEMM configs, 0.4 GB for one.
const BYTES_PER_CONFIG: u64 = 400 << 20;

/// The batch size kart chooses for `configs` configs that may share a pass, on `jobs`
/// parallel compiles: enough batches to keep every core busy, at most [`MAX_BATCH`],
/// and no more than `jobs` passes fit in `memory` (bytes available, when known).
pub fn auto_size(configs: usize, jobs: usize, memory: Option<u64>) -> usize {
    let jobs = jobs.max(1);
    let by_memory = memory.map_or(MAX_BATCH, |m| {
        (m / (jobs as u64 * BYTES_PER_CONFIG)).min(MAX_BATCH as u64) as usize
    });
    configs.div_ceil(jobs).clamp(1, by_memory.max(1))
}

/// The memory available to new processes (`MemAvailable` of /proc/meminfo), if known.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Why a batch produced no per-config results.
#[derive(Debug)]
pub enum BatchFailure {
    /// The batch could not run as one (a config's instantiation failed, a check of
    /// the shared pass failed): each config is compiled alone, so each failure is
    /// reported with its own config and nvcc's message.
    Retry(String),
    /// nvcc failed in a source every config shares (nothing names an instance): every
    /// config fails with this one failure, and compiling each alone would only repeat
    /// it.
    Shared(CompileFailure),
}

impl From<String> for BatchFailure {
    fn from(why: String) -> BatchFailure {
        BatchFailure::Retry(why)
    }
}

impl From<&str> for BatchFailure {
    fn from(why: &str) -> BatchFailure {
        BatchFailure::Retry(why.to_string())
    }
}

/// Compiles `jobs` (all of one [`batch_key`]) with one nvcc front-end pass in
/// `scratch`. An error (why) when the batch cannot be compiled as one (nvcc failed or
/// timed out on some config): the caller compiles each config alone, so each failure
/// is reported with its own config and nvcc's message.
pub fn compile_batch(
    jobs: &[CompileJob<'_>],
    scratch: &Path,
) -> Result<Vec<Result<CompileOutput, CompileFailure>>, BatchFailure> {
    compile_batch_on(jobs, scratch, &Local)
}

/// [`compile_batch`], with nvcc and each ptxas run by `runner` (`nvcc --dryrun`, which
/// only prints, runs here).
pub fn compile_batch_on(
    jobs: &[CompileJob<'_>],
    scratch: &Path,
    runner: &dyn Runner,
) -> Result<Vec<Result<CompileOutput, CompileFailure>>, BatchFailure> {
    let first = jobs.first().ok_or("an empty batch")?;
    let batch_instances = jobs
        .iter()
        .map(|j| j.kernel.template_instances(j.config))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut names: Vec<String> = Vec::new();
    for (_, instance) in batch_instances.iter().flatten() {
        if !names.contains(instance) {
            names.push(instance.clone());
        }
    }
    let main = scratch.join(INSTANCES_FILE);
    let source = first.kernel.sources[0]
        .file_name()
        .ok_or("the kernel's source has no file name")?;
    std::fs::write(
        &main,
        translation_unit(Path::new(source), first.kernel.prelude.as_deref(), &names),
    )
    .map_err(|e| format!("cannot write the batch's unit: {e}"))?;

    let ptxas = ptxas_command(first, &main, scratch)
        .ok_or("`nvcc --dryrun` did not say how it runs ptxas")?;
    let ptx_path = scratch.join("batch.ptx");
    let deps = scratch.join("batch.d");
    let mut args: Vec<String> = nvcc_args(first, &main, &ptx_path, &deps)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|a| a != "--resource-usage")
        .map(|a| if a == "-cubin" { "-ptx".to_string() } else { a })
        .collect();
    let table = phases::table(&first.kernel.name, jobs.len());
    phases::add_time_arg(&mut args, table.as_deref());
    let timeout: Duration = jobs.iter().map(|j| j.timeout).sum();
    let run = Run {
        tool: Tool::Nvcc,
        args: &args,
        scratch,
        inputs: std::slice::from_ref(&main),
        outputs: &[ptx_path.clone(), deps.clone()],
        timeout,
    };
    let outcome = runner
        .run(first, &run)
        .map_err(|e| format!("cannot run nvcc: {e}"))?;
    if outcome.timed_out {
        return Err(format!("nvcc timed out after {} s", timeout.as_secs()).into());
    }
    if !outcome.status.is_some_and(|s| s.success()) {
        let output = without_scratch(&(outcome.stderr.clone() + &outcome.stdout), scratch);
        // An error in a line of a source every config includes (a syntax error) names
        // no instance: neither "detected during instantiation of …" nor a line of
        // kart_instances.cu is in nvcc's output.
        let names_an_instance = output.lines().any(|l| {
            l.contains("during instantiation")
                || (l.contains(INSTANCES_FILE) && !l.contains("detected in the compilation of"))
        });
        if !names_an_instance && output.contains("error") {
            let shown = without_scratch(&format!("nvcc {}", args.join(" ")), scratch);
            let failure = CompileFailure {
                summary: format!(
                    "nvcc failed in a source all {} configs of the batch share{}",
                    jobs.len(),
                    crate::toolchain::headers::missing_header_hint(
                        &output,
                        &first.toolchain.packages
                    )
                    .map(|hint| format!(": {hint}"))
                    .unwrap_or_default()
                ),
                details: frame(&shown, &output),
                disk_full: false,
                group: output.clone(),
            };
            return Err(BatchFailure::Shared(failure));
        }
        let first_error = output
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("no message")
            .to_string();
        return Err(format!("nvcc failed: {first_error}").into());
    }
    let mut read = parse_depfile(&std::fs::read_to_string(&deps).unwrap_or_default());
    read.retain(|d| *d != main);
    if let Err(details) = check_dependencies(first.root, first.toolchain, first.kernel, &read) {
        // The same for every config of the batch: each reports it.
        return Ok(jobs
            .iter()
            .map(|_| {
                Err(CompileFailure {
                    summary: "undeclared include".into(),
                    details: details.clone(),
                    disk_full: false,
                    group: String::new(),
                })
            })
            .collect());
    }
    let module = std::fs::read_to_string(&ptx_path)
        .map_err(|e| format!("cannot read the batch's PTX: {e}"))?;
    let defined = crate::cubin::ptx_entries(module.as_bytes())?;
    let front_end = outcome.elapsed / jobs.len() as u32;
    let results = jobs
        .iter()
        .zip(&batch_instances)
        .map(|(job, instances)| {
            let fail = |summary: String, details: String| CompileFailure {
                summary,
                details,
                disk_full: false,
                group: String::new(),
            };
            let symbols = find_symbols(instances, &batch_instances, &defined)
                .map_err(|why| fail(format!("the batch's PTX: {why}"), String::new()))?;
            let mut templates = symbols.into_iter();
            // A plain C++ entry's overloads cannot be told apart in PTX (no parameter
            // sizes yet): an ambiguous one makes this config compile alone.
            let entries: Vec<String> = job
                .kernel
                .entry
                .iter()
                .map(|name| match job.kernel.templates.get(name) {
                    Some(_) => Ok(templates.next().unwrap_or_default()),
                    None => plain_symbol(name, &defined, &|_| false),
                })
                .collect::<Result<_, _>>()
                .map_err(|why| fail(format!("the batch's PTX: {why}"), String::new()))?;
            let own = crate::pipeline::ptx::split(&module, &entries)
                .map_err(|why| fail(format!("the batch's PTX: {why}"), String::new()))?;
            // Every config of the batch uses the same two files in turn (the configs
            // run one after another): a file rewritten costs less than a new one, and
            // the cubin does not depend on the names.
            let ptx = scratch.join("config.ptx");
            let cubin = scratch.join("config.cubin");
            overwrite(&ptx, own.as_bytes()).map_err(|e| {
                fail(
                    format!("cannot write `{}`: {e}", ptx.display()),
                    String::new(),
                )
            })?;
            let mut args = ptxas.args.clone();
            args.push(ptx.display().to_string());
            args.push("-o".into());
            args.push(cubin.display().to_string());
            let run = Run {
                tool: Tool::Ptxas,
                args: &args,
                scratch,
                inputs: std::slice::from_ref(&ptx),
                outputs: std::slice::from_ref(&cubin),
                timeout: job.timeout,
            };
            let shown = format!(
                "{} {} {} -o {}",
                ptxas.program.display(),
                ptxas.args.join(" "),
                ptx.display(),
                cubin.display()
            );
            let run = runner
                .run(job, &run)
                .map_err(|e| fail(format!("cannot run ptxas: {e}"), String::new()))?;
            phases::add_ptxas_row(
                table.as_deref(),
                &ptx,
                &cubin,
                &job.target.to_string(),
                run.elapsed,
            );
            let stderr = without_scratch(&(run.stderr.clone() + &run.stdout), scratch);
            if run.timed_out || !run.status.is_some_and(|s| s.success()) {
                let shown = without_scratch(&shown, scratch);
                // A resource limit is the config's, not the batch's: alone it fails the
                // same way, so it is final.
                if let Some(limit) = crate::pipeline::infeasible::limit(&stderr) {
                    let target = job.target.to_string();
                    return Err(CompileFailure {
                        summary: limit.summary(&target),
                        details: frame(&shown, &stderr),
                        disk_full: false,
                        group: limit.group(&target),
                    });
                }
                return Err(fail(
                    "ptxas failed on the batch's PTX".into(),
                    frame(&shown, &stderr),
                ));
            }
            let bytes = std::fs::read(&cubin).map_err(|e| {
                fail(
                    format!(
                        "ptxas succeeded but `{}` is unreadable: {e}",
                        cubin.display()
                    ),
                    String::new(),
                )
            })?;
            let full = |why: String| fail(why, frame(&shown, &stderr));
            finish(
                job,
                bytes,
                stderr.clone(),
                instances,
                front_end + run.elapsed,
                &full,
            )
        })
        .collect();
    Ok(results)
}

/// Writes `bytes` over the file at `path` (made if missing) without first cutting it to
/// nothing: ext4 takes a file truncated to zero and written again for a replaced file
/// and writes its blocks to disk when it is closed, a disk write per config for a file
/// that is only scratch. Cut to the new length after the write instead.
fn overwrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}

/// ptxas as nvcc runs it for a compile of `job` alone: the program and its arguments
/// but the input and output.
#[derive(Clone)]
struct Ptxas {
    program: PathBuf,
    args: Vec<String>,
}

/// The answers of `nvcc --dryrun` this process has had, by [`dryrun_key`]. Every batch
/// of one kernel and target with the same flags and macros asks the same question but
/// for the scratch folder's name, and nvcc's answer depends on nothing else: it runs
/// nothing and reads no source (its arguments, the toolkit and the folder it runs in
/// are the key). A build of 100 batches of one kernel then runs one `--dryrun` per
/// target instead of 100.
static DRYRUNS: std::sync::Mutex<Option<std::collections::HashMap<String, Ptxas>>> =
    std::sync::Mutex::new(None);

/// What nvcc's `--dryrun` answer for `args` in `root` is a function of: the toolkit (its
/// fingerprint covers nvcc, ptxas and nvcc.profile), nvcc's path, the folder it runs in,
/// and the arguments with the scratch folder's path replaced by a placeholder.
fn dryrun_key(job: &CompileJob<'_>, args: &[String], scratch: &Path) -> String {
    let folder = scratch.display().to_string();
    let mut key = format!(
        "{}\0{}\0{}",
        job.toolchain.fingerprint,
        job.toolchain.nvcc.display(),
        job.root.display()
    );
    for arg in args {
        key.push('\0');
        key.push_str(&arg.replace(&folder, "\u{1}scratch"));
    }
    key
}

/// Asks nvcc (`--dryrun`, which runs nothing) how it would call ptxas for `job`, or
/// takes the answer it gave this process for the same question ([`DRYRUNS`]).
fn ptxas_command(job: &CompileJob<'_>, main: &Path, scratch: &Path) -> Option<Ptxas> {
    let mut args = nvcc_args(
        job,
        main,
        &scratch.join("probe.cubin"),
        &scratch.join("probe.d"),
    )
    .ok()?;
    args.push("--dryrun".into());
    let key = dryrun_key(job, &args, scratch);
    if let Ok(known) = DRYRUNS.lock()
        && let Some(ptxas) = known.as_ref().and_then(|k| k.get(&key))
    {
        return Some(ptxas.clone());
    }
    let mut cmd = Command::new(&job.toolchain.nvcc);
    cmd.args(&args).current_dir(job.root);
    let outcome = run_with_timeout(&mut cmd, Duration::from_secs(60)).ok()?;
    let text = outcome.stderr + &outcome.stdout;
    let ptxas = ptxas_from_dryrun(&text, &job.toolchain.root)?;
    // An answer that names this batch's folder is this batch's alone.
    let folder = scratch.display().to_string();
    if !ptxas.args.iter().any(|a| a.contains(&folder))
        && let Ok(mut known) = DRYRUNS.lock()
    {
        known.get_or_insert_default().insert(key, ptxas.clone());
    }
    Some(ptxas)
}

/// ptxas's arguments from `nvcc --dryrun`'s output, without its input and output.
fn ptxas_from_dryrun(text: &str, toolkit_root: &Path) -> Option<Ptxas> {
    let line = text.lines().find_map(|l| l.strip_prefix("#$ ptxas "))?;
    let words = shell_words(line);
    let mut kept = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
        } else if w == "-o" {
            skip_next = true;
        } else if !w.ends_with(".ptx") {
            kept.push(w);
        }
    }
    Some(Ptxas {
        // The ptxas of the toolkit the key fingerprints (`bin/ptxas`), as nvcc runs it.
        program: toolkit_root.join("bin").join("ptxas"),
        args: kept,
    })
}

/// A command line as nvcc's `--dryrun` prints it: words split at blanks, `"…"` quoted.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dryrun_lines_split_into_words() {
        assert_eq!(
            shell_words(r#"-arch=sm_90a -m64 -v  "scratch dir/a.ptx"  -o "out.cubin" "#),
            [
                "-arch=sm_90a",
                "-m64",
                "-v",
                "scratch dir/a.ptx",
                "-o",
                "out.cubin"
            ]
        );
    }

    #[test]
    fn batches_keep_every_core_busy_and_stay_small() {
        assert_eq!(auto_size(10, 2, None), 5);
        assert_eq!(auto_size(168, 2, None), MAX_BATCH);
        assert_eq!(auto_size(3, 16, None), 1);
        assert_eq!(auto_size(0, 2, None), 1);
        // 2 GiB for two passes: two configs each.
        assert_eq!(auto_size(168, 2, Some(2 << 30)), 2);
        assert_eq!(auto_size(168, 2, Some(0)), 1);
    }
}
