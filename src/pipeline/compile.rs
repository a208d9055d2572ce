//! One nvcc run: the command line, the timeout, the dependency check and the output
//! check.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cubin::{
    EntryInfo, check_cubin, check_ptx, inspect_cubin, param_sizes, parse_resource_usage,
    ptx_entries,
};
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::pipeline::deps::{check_dependencies, parse_depfile};
use crate::pipeline::process::{ProcessOutcome, run_with_timeout};
use crate::project::Kernel;
use crate::project::entry::{TemplateEntry, find_symbols, plain_symbol, translation_unit};
use crate::signature::check_signature;
use crate::target::TargetArch;
use crate::toolchain::Toolchain;

/// What to compile.
#[derive(Clone, Copy, Debug)]
pub struct CompileJob<'a> {
    /// The project root; nvcc runs there, with paths relative to it.
    pub root: &'a Path,
    /// The toolchain.
    pub toolchain: &'a Toolchain,
    /// The kernel.
    pub kernel: &'a Kernel,
    /// The config's params.
    pub config: &'a Config,
    /// The target.
    pub target: TargetArch,
    /// cubin or PTX.
    pub kind: ArtifactKind,
    /// Kill nvcc (and its children) after this long.
    pub timeout: Duration,
}

/// A checked compile result.
#[derive(Debug)]
pub struct CompileOutput {
    /// The artifact's bytes.
    pub bytes: Vec<u8>,
    /// nvcc's stderr (warnings, the ptxas report).
    pub stderr: String,
    /// Resources per entry (empty fields for PTX).
    pub entries: Vec<EntryInfo>,
    /// nvcc's wall time.
    pub elapsed: Duration,
}

/// Why a compile produced no artifact. The message is complete (command, framed
/// stderr, what to do), ready to show.
#[derive(Clone, Debug)]
pub struct CompileFailure {
    /// One line: what failed.
    pub summary: String,
    /// The details: nvcc's stderr or the failed check.
    pub details: String,
    /// The disk holding the output is full: the machine's fault, not the toolchain's or
    /// the kernel's.
    pub disk_full: bool,
    /// Failures of one group are one error hitting several configs (a template entry
    /// that names no template), shown once; empty: the summary and nvcc's output decide.
    pub group: String,
}

impl std::fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.summary)?;
        if !self.details.is_empty() {
            write!(f, "\n{}", self.details)?;
        }
        Ok(())
    }
}

/// A program of the toolkit that a compile runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// nvcc (`job.toolchain.nvcc`).
    Nvcc,
    /// ptxas of the fingerprinted toolkit (`bin/ptxas`), run by a batch per config.
    Ptxas,
}

impl Tool {
    /// The program's path on this machine.
    pub fn local_path(self, job: &CompileJob<'_>) -> PathBuf {
        match self {
            Tool::Nvcc => job.toolchain.nvcc.clone(),
            Tool::Ptxas => job.toolchain.root.join("bin").join("ptxas"),
        }
    }
}

/// One run of a toolkit program for a compile: `args` name files relative to the
/// project root (its sources, include folders, header libraries) or inside `scratch`,
/// the compile's private folder, which holds the files kart generated for it (`inputs`)
/// and receives the files the program writes (`outputs`).
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    /// The program.
    pub tool: Tool,
    /// Its arguments, as a local run passes them.
    pub args: &'a [String],
    /// The compile's private folder.
    pub scratch: &'a Path,
    /// Files of `scratch` the program reads.
    pub inputs: &'a [PathBuf],
    /// Files of `scratch` the program writes.
    pub outputs: &'a [PathBuf],
    /// Kill it after this long.
    pub timeout: Duration,
}

/// Where a compile's programs run: here ([`Local`]), or on a remote executor, which
/// runs the same command line and puts the same output files into `scratch`. Either
/// way the compile checks and reads what came back with the same code.
pub trait Runner: Sync {
    /// Runs `run` for `job` and says how it ended; an error when it could not be run.
    fn run(&self, job: &CompileJob<'_>, run: &Run<'_>) -> std::io::Result<ProcessOutcome>;
}

/// Runs each program on this machine, in the project root.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Runner for Local {
    fn run(&self, job: &CompileJob<'_>, run: &Run<'_>) -> std::io::Result<ProcessOutcome> {
        let mut cmd = Command::new(run.tool.local_path(job));
        cmd.args(run.args).current_dir(job.root);
        run_with_timeout(&mut cmd, run.timeout)
    }
}

/// The file nvcc compiles for a job: the kernel's first source, or for a kernel with
/// template entries the translation unit that instantiates them (written by
/// [`compile`] into its scratch folder).
pub fn main_file(job: &CompileJob<'_>, scratch: &Path) -> PathBuf {
    if job.kernel.templates.is_empty() {
        job.kernel.sources[0].clone()
    } else {
        scratch.join(INSTANCES_FILE)
    }
}

/// The generated translation unit's name in the scratch folder.
pub(crate) const INSTANCES_FILE: &str = "kart_instances.cu";

/// The nvcc arguments (after the program) for a job writing into `out` and `deps`,
/// compiling `main` (see [`main_file`]).
pub fn nvcc_args(
    job: &CompileJob<'_>,
    main: &Path,
    out: &Path,
    deps: &Path,
) -> crate::error::Result<Vec<String>> {
    let mut args = Vec::new();
    match job.kind {
        ArtifactKind::Cubin => {
            args.push("-cubin".to_string());
            args.push(job.target.gencode_cubin());
        }
        ArtifactKind::Ptx => {
            args.push("-ptx".to_string());
            args.push(job.target.gencode_ptx());
        }
    }
    args.extend(job.kernel.flags.iter().cloned());
    args.extend(reproducible_args(job.kernel));
    for (name, value) in &job.kernel.defines {
        args.push(format!("-D{name}={value}"));
    }
    for (name, value) in job.kernel.macro_params(job.config)? {
        args.push(format!("-D{name}={value}"));
    }
    for name in job.kernel.bare_macros(job.config) {
        args.push(format!("-D{name}"));
    }
    // A template kernel's source is included by the generated unit through its own
    // folder, so the source's name in line markers (`__FILE__`, line info) is the same
    // project-relative path in every checkout.
    if !job.kernel.templates.is_empty() {
        args.push(format!("-I{}", source_folder(job.kernel).display()));
    }
    for dir in &job.kernel.include {
        args.push(format!("-I{}", dir.display()));
    }
    // Header libraries as system folders: their warnings are not the kernel's.
    for name in &job.kernel.libraries {
        if let Some(pin) = job.toolchain.libraries.get(name) {
            args.push("-isystem".to_string());
            args.push(pin.include.display().to_string());
        }
    }
    if job.kind == ArtifactKind::Cubin {
        args.push("--resource-usage".to_string());
    }
    args.push("-MD".to_string());
    args.push("-MF".to_string());
    args.push(deps.display().to_string());
    args.push("-o".to_string());
    args.push(out.display().to_string());
    // nvcc picks the language by extension and refuses a header (`.cuh`, `.h`) as the
    // file to compile: say it is CUDA. `.cu` files (and kart's generated units) are
    // passed as before, so their command lines and keys are unchanged.
    if main.extension().is_none_or(|e| e != "cu") {
        args.push("-x".to_string());
        args.push("cu".to_string());
    }
    args.push(main.display().to_string());
    Ok(args)
}

/// nvcc names internal-linkage device symbols (anonymous namespaces, `static` objects of
/// libraries such as libcu++ and CuTe) after a module id that mixes a hash of the
/// compiled file's absolute path with the front end's process id, so the same unit gives
/// another cubin on every run and in every folder. `-frandom-seed` replaces the process
/// id, and a fixed `--orig_src_path_name` (cicc takes the last one given) replaces the
/// absolute path: the module id then depends on the kernel's name alone. Only safe
/// characters reach nvcc's shell here: the kernel's name is a C identifier.
pub fn reproducible_args(kernel: &Kernel) -> Vec<String> {
    vec![
        "-frandom-seed=kart".to_string(),
        "-Xcicc".to_string(),
        "--orig_src_path_name".to_string(),
        "-Xcicc".to_string(),
        format!("{}.cu", kernel.name),
    ]
}

/// The folder of a kernel's compiled source, relative to the project root.
fn source_folder(kernel: &Kernel) -> &Path {
    kernel.sources[0].parent().unwrap_or(Path::new("."))
}

/// A config whose derived params cannot be evaluated (a kernel loaded without the
/// grid's check) fails like a compile, with the expression's error.
fn key_input_failure(e: crate::error::Error) -> CompileFailure {
    CompileFailure {
        summary: e.to_string(),
        details: String::new(),
        disk_full: false,
        group: String::new(),
    }
}

/// Runs nvcc for `job` in `scratch` (a private folder) and checks what it wrote.
pub fn compile(job: &CompileJob<'_>, scratch: &Path) -> Result<CompileOutput, CompileFailure> {
    compile_on(job, scratch, &Local)
}

/// [`compile`], with nvcc run by `runner`.
pub fn compile_on(
    job: &CompileJob<'_>,
    scratch: &Path,
    runner: &dyn Runner,
) -> Result<CompileOutput, CompileFailure> {
    let out = scratch.join(match job.kind {
        ArtifactKind::Cubin => "out.cubin",
        ArtifactKind::Ptx => "out.ptx",
    });
    let deps = scratch.join("out.d");
    let main = main_file(job, scratch);
    let instances = job
        .kernel
        .template_instances(job.config)
        .map_err(key_input_failure)?;
    if !instances.is_empty() {
        if main.file_name() == job.kernel.sources[0].file_name() {
            return Err(CompileFailure {
                summary: format!(
                    "the source `{}` has the name of the unit kart generates for template entries: rename it",
                    job.kernel.sources[0].display()
                ),
                details: String::new(),
                disk_full: false,
                group: String::new(),
            });
        }
        let names: Vec<String> = instances.iter().map(|(_, i)| i.clone()).collect();
        let source_name = job.kernel.sources[0]
            .file_name()
            .map_or_else(|| job.kernel.sources[0].clone(), PathBuf::from);
        let tu = translation_unit(&source_name, job.kernel.prelude.as_deref(), &names);
        std::fs::write(&main, tu).map_err(|e| CompileFailure {
            summary: format!("cannot write `{}`: {e}", main.display()),
            details: String::new(),
            disk_full: false,
            group: String::new(),
        })?;
    }
    let mut args = nvcc_args(job, &main, &out, &deps).map_err(key_input_failure)?;
    let shown = without_scratch(&format!("nvcc {}", args.join(" ")), scratch);
    crate::pipeline::phases::add_time_arg(
        &mut args,
        crate::pipeline::phases::table(&job.kernel.name, 1).as_deref(),
    );
    let generated = if instances.is_empty() {
        Vec::new()
    } else {
        vec![main.clone()]
    };
    let run = Run {
        tool: Tool::Nvcc,
        args: &args,
        scratch,
        inputs: &generated,
        outputs: &[out.clone(), deps.clone()],
        timeout: job.timeout,
    };
    let outcome = runner.run(job, &run).map_err(|e| CompileFailure {
        summary: format!("cannot run `{}`: {e}", job.toolchain.nvcc.display()),
        details: String::new(),
        disk_full: false,
        group: String::new(),
    })?;
    let stderr = without_scratch(&(outcome.stderr.clone() + &outcome.stdout), scratch);
    if outcome.timed_out {
        return Err(CompileFailure {
            summary: format!(
                "nvcc timed out after {} s and was killed with every process it started",
                job.timeout.as_secs_f64()
            ),
            details: frame(&shown, &stderr),
            disk_full: false,
            group: String::new(),
        });
    }
    if !outcome.status.is_some_and(|s| s.success()) {
        let status = outcome
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "killed".into());
        let target = job.target.to_string();
        let (summary, group) = match entry_error(job, &instances, &stderr) {
            Some(summary) => (summary.clone(), summary),
            None => match crate::pipeline::infeasible::limit(&stderr) {
                Some(limit) => (limit.summary(&target), limit.group(&target)),
                None => match crate::toolchain::headers::missing_header_hint(
                    &stderr,
                    &job.toolchain.packages,
                ) {
                    Some(hint) => (format!("nvcc failed ({status}): {hint}"), hint),
                    None => (format!("nvcc failed ({status})"), String::new()),
                },
            },
        };
        return Err(CompileFailure {
            summary,
            details: frame(&shown, &stderr),
            disk_full: false,
            group,
        });
    }
    // A full disk makes nvcc "succeed" with a cut-short file (the cubin, or the
    // dependency file with a path cut in two): say so, not that nvcc, an include or the
    // cubin is broken.
    let full = |why: String, details: String| match crate::store::fsutil::disk_full(scratch) {
        Some(full) => CompileFailure {
            summary: format!("{full} (nvcc's output was cut short)"),
            details: String::new(),
            disk_full: true,
            group: String::new(),
        },
        None => CompileFailure {
            summary: why,
            details,
            disk_full: false,
            group: String::new(),
        },
    };
    let dep_text = std::fs::read_to_string(&deps).unwrap_or_default();
    let mut read = parse_depfile(&dep_text);
    read.retain(|d| *d != main || instances.is_empty());
    check_dependencies(job.root, job.toolchain, job.kernel, &read)
        .map_err(|details| full("undeclared include".into(), details))?;
    let full = |why: String| full(why, frame(&shown, &stderr));
    let bytes = std::fs::read(&out).map_err(|e| {
        full(format!(
            "nvcc succeeded but `{}` is unreadable: {e}",
            out.display()
        ))
    })?;
    finish(
        job,
        bytes,
        stderr.clone(),
        &instances,
        outcome.elapsed,
        &full,
    )
}

/// The checks and facts of a compiled artifact, shared by a compile alone and one cut
/// out of a batch: its entries' symbols, the image's own check, resources from ptxas's
/// report, parameter sizes and the declared signatures. `full` turns a failed check
/// into the failure to report.
pub(crate) fn finish(
    job: &CompileJob<'_>,
    bytes: Vec<u8>,
    stderr: String,
    instances: &[(&TemplateEntry, String)],
    elapsed: Duration,
    full: &dyn Fn(String) -> CompileFailure,
) -> Result<CompileOutput, CompileFailure> {
    let symbols = entry_symbols(job, &bytes, instances)
        .map_err(|why| full(format!("nvcc's output failed its check: {why}")))?;
    let checked = match job.kind {
        ArtifactKind::Cubin => check_cubin(&bytes, job.target, &symbols).map(|_| ()),
        ArtifactKind::Ptx => check_ptx(&bytes, job.target, &symbols),
    };
    checked.map_err(|why| full(format!("nvcc's output failed its check: {why}")))?;
    let mut entries = match job.kind {
        ArtifactKind::Cubin => parse_resource_usage(&stderr, &symbols),
        ArtifactKind::Ptx => symbols
            .iter()
            .map(|e| EntryInfo {
                name: e.clone(),
                ..EntryInfo::default()
            })
            .collect(),
    };
    // Callers find entries by the names of kernel.toml; the lock keeps the symbol.
    for (entry, (name, symbol)) in entries
        .iter_mut()
        .zip(job.kernel.entry.iter().zip(&symbols))
    {
        if name != symbol {
            entry.name = name.clone();
            entry.symbol = Some(symbol.clone());
        }
        if let Some(t) = job.kernel.templates.get(name) {
            entry.template = Some(t.written.clone());
            entry.instance = instances
                .iter()
                .find(|(e, _)| e.name == *name)
                .map(|(_, i)| i.clone());
        }
    }
    for entry in &mut entries {
        if job.kind == ArtifactKind::Cubin {
            entry.params = param_sizes(&bytes, entry.symbol()).map_err(|why| CompileFailure {
                summary: format!("nvcc's output failed its check: {why}"),
                details: String::new(),
                disk_full: false,
                group: String::new(),
            })?;
        }
        if let Some(declared) = job.kernel.signature.get(&entry.name) {
            if job.kind == ArtifactKind::Cubin {
                check_signature(&entry.name, declared, &entry.params).map_err(|why| {
                    CompileFailure {
                        summary: why,
                        details: format!(
                            "  fix `[signature]` in {} to match the kernel's parameters",
                            job.kernel.manifest.display()
                        ),
                        disk_full: false,
                        group: String::new(),
                    }
                })?;
            }
            entry.signature = Some(declared.clone());
        }
    }
    Ok(CompileOutput {
        bytes,
        stderr,
        entries,
        elapsed,
    })
}

/// nvcc's first error on a line of the generated unit, as an error at the template
/// entry of kernel.toml that line instantiates (the unit is a temporary file: the
/// line to fix is the entry's), with "did you mean" among the source's kernels.
fn entry_error(
    job: &CompileJob<'_>,
    instances: &[(&TemplateEntry, String)],
    stderr: &str,
) -> Option<String> {
    let (line, message) = stderr.lines().find_map(|l| {
        // `…/kart_instances.cu(3): error: identifier "tiles" is undefined`
        let at = l.find(&format!("{INSTANCES_FILE}("))?;
        let rest = &l[at + INSTANCES_FILE.len() + 1..];
        let (number, rest) = rest.split_once("): ")?;
        let message = rest.strip_prefix("error: ")?;
        Some((number.parse::<usize>().ok()?, message.trim().to_string()))
    })?;
    // The unit's line 1 is a comment, line 2 the #include, line 3 + i instance i.
    let (entry, _) = instances.get(line.checked_sub(3)?)?;
    let manifest = job.root.join(&job.kernel.manifest);
    let text = kart_runtime::text::read_text(&manifest, kart_runtime::text::Limit::MANIFEST)
        .unwrap_or_default();
    let (row, column) = text
        .find(&entry.written)
        .map(|offset| {
            let before = &text[..offset];
            let row = before.matches('\n').count() + 1;
            let column = offset - before.rfind('\n').map_or(0, |p| p + 1) + 1;
            (row, column)
        })
        .unwrap_or((1, 1));
    let kernels = global_functions(job);
    let short = entry.name.rsplit("::").next().unwrap_or(&entry.name);
    let guess = crate::suggest::did_you_mean(short, kernels.iter().map(String::as_str))
        .map(|g| format!("; {g}"))
        .unwrap_or_default();
    Some(format!(
        "{}:{row}:{column}: entry `{}` does not compile: {message} (nvcc, where kart's generated unit instantiates it){guess}",
        job.kernel.manifest.display(),
        entry.written,
    ))
}

/// The names of the `__global__` functions the kernel's first source defines, read
/// loosely (the word before the first `(` after `__global__`): hints only.
fn global_functions(job: &CompileJob<'_>) -> Vec<String> {
    let text = kart_runtime::text::read_text(
        &job.root.join(&job.kernel.sources[0]),
        kart_runtime::text::Limit::SOURCE,
    )
    .unwrap_or_default();
    text.split("__global__")
        .skip(1)
        .filter_map(|after| {
            let head = &after[..after.find('(')?];
            let name = head
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .rfind(|w| !w.is_empty())?;
            Some(name.to_string())
        })
        .collect()
}

/// The symbol of each entry, in order: an `extern "C"` entry is its own symbol; a
/// template entry's is found among the image's functions by demangling.
fn entry_symbols(
    job: &CompileJob<'_>,
    bytes: &[u8],
    instances: &[(&TemplateEntry, String)],
) -> Result<Vec<String>, String> {
    let functions = match job.kind {
        ArtifactKind::Cubin => inspect_cubin(bytes)?.functions,
        ArtifactKind::Ptx => ptx_entries(bytes)?,
    };
    let found = find_symbols(instances, &[instances.to_vec()], &functions)?;
    job.kernel
        .entry
        .iter()
        .map(
            |name| match instances.iter().position(|(e, _)| e.name == *name) {
                Some(i) => Ok(found[i].clone()),
                None => plain_symbol(name, &functions, &|symbol| {
                    signature_fits(job, bytes, name, symbol)
                }),
            },
        )
        .collect()
}

/// Whether the function `symbol` of a cubin takes the parameters `[signature]` declares
/// for entry `name` (false without a declaration, or for PTX).
pub(crate) fn signature_fits(job: &CompileJob<'_>, bytes: &[u8], name: &str, symbol: &str) -> bool {
    job.kind == ArtifactKind::Cubin
        && job.kernel.signature.get(name).is_some_and(|declared| {
            param_sizes(bytes, symbol)
                .is_ok_and(|sizes| check_signature(name, declared, &sizes).is_ok())
        })
}

/// Frames a command's output so it stands apart from kart's own messages. Output that
/// names the unit kart generated says what that file is, since it is gone by now.
pub(crate) fn frame(command: &str, output: &str) -> String {
    let mut s = format!("  ┌─ {command}\n");
    for line in output.trim_end().lines() {
        s.push_str("  │ ");
        s.push_str(line);
        s.push('\n');
    }
    s.push_str("  └─");
    if output.contains(INSTANCES_FILE) {
        s.push_str(&format!(
            "\n  ({INSTANCES_FILE} is the unit kart writes to instantiate the template entries; `kart build --keep-temps` keeps it)"
        ));
    }
    s
}

/// `text` (a command line, nvcc's output) with the private scratch folder's path taken
/// out: the files in it are named by their own names. Two configs that fail alike then
/// print alike (and are shown once), and no message points at a folder already removed.
pub(crate) fn without_scratch(text: &str, scratch: &Path) -> String {
    let folder = scratch.display().to_string();
    text.replace(&format!("{folder}/"), "")
        .replace(&folder, ".")
}

/// nvcc's warnings in its stored output: without `--resource-usage`'s `ptxas info`
/// lines and their indented continuations, which the lock already carries as numbers.
pub fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| !l.starts_with("ptxas info") && !l.starts_with("    ") && !l.trim().is_empty())
        .collect()
}
