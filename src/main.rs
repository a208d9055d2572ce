//! The `kart` command: argument parsing, progress drawing and exit codes. Everything
//! else is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use kart::build::{
    BuildOptions, BuildReporter, Selection, Shard, Workspace, build, explain_change, parse_param,
};
use kart::compile::CompileFailure;
use kart::error::{Error, IoContext, Result};
use kart::key::{ArtifactKind, action_key, action_preimage, kernel_input_files};
use kart::lockfile::{LOCK_FILE, Lockfile, describe, lock_path};
use kart::maintain;
use kart::manifest::{Config, ParamValue, Project};
use kart::store::LockMode;
use kart::target::TargetArch;

/// kart (kernel artifacts): compile every config of your CUDA kernels to cubin offline,
/// keep them by content, load them at run time with no JIT.
#[derive(Parser)]
#[command(name = "kart", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Run as if started in this folder (kart.toml is searched from here upwards).
    #[arg(short = 'C', long, global = true, value_name = "DIR")]
    directory: Option<PathBuf>,
    /// nvcc to use (default: KART_NVCC, .toolchain/, CUDA_HOME, CUDA_PATH, PATH).
    #[arg(long, global = true, value_name = "PATH", env = "KART_NVCC")]
    nvcc: Option<PathBuf>,
    /// Print nothing but data and errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Seconds to wait for another kart process holding the store.
    #[arg(long, global = true, default_value_t = 60, value_name = "SECONDS")]
    lock_timeout: u64,
    /// The remote cache (default: kart.toml's [remote] url). http://, https:// or
    /// file://; the bearer token comes from KART_REMOTE_TOKEN.
    #[arg(long, global = true, value_name = "URL", env = "KART_REMOTE")]
    remote: Option<String>,
    /// Never write to the remote.
    #[arg(long, global = true)]
    read_only: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile every missing artifact of the selection and write kart.lock.
    ///
    /// Takes each artifact from the store when its action key is there, else compiles
    /// it. The first build with a new toolchain compiles the built-in smoke kernel
    /// first and stops within seconds if nvcc cannot build it.
    Build(BuildArgs),
    /// List the artifacts of kart.lock with their resources.
    Ls {
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show every input of an artifact's action key and what changed against the lock.
    Explain {
        /// The kernel.
        kernel: String,
        /// Param values (all params of the kernel): -p BLOCK_M=64 -p NUM_WARPS=4.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
        params: Vec<(String, ParamValue)>,
        /// The target (default: the kernel's first).
        #[arg(long)]
        target: Option<TargetArch>,
        /// Explain the PTX artifact instead of the cubin.
        #[arg(long)]
        ptx: bool,
    },
    /// Re-hash every blob and entry of the store; quarantine corrupt ones (exit 1).
    Verify {
        /// Also recompile N artifacts of the lock, sampled, and compare digests.
        #[arg(long, value_name = "N", default_value_t = 0)]
        rebuild: usize,
        /// Seed of the sample (default: the clock).
        #[arg(long)]
        seed: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prove the whole loop on the built-in smoke kernel, stage by stage with timings:
    /// toolchain, compile, store, verify, driver, load, resolve, launch, check.
    ///
    /// Without a GPU the GPU stages are skipped and kart exits 3 (0 with --allow-no-gpu).
    Smoke {
        /// Exit 0 when there is no GPU (for CI machines).
        #[arg(long)]
        allow_no_gpu: bool,
        /// Print the stages as JSON.
        #[arg(long)]
        json: bool,
        /// Then load and resolve every cubin of kart.lock this GPU can run (each
        /// checked in a child process) and record the passes in kart.attest.
        #[arg(long)]
        all: bool,
    },
    /// Check blobs of kart.lock on GPU 0, one JSON line each (used by `smoke --all`).
    #[command(hide = true)]
    AttestWorker {
        /// The blobs' digests.
        digests: Vec<String>,
    },
    /// Toolchain, driver, GPUs, and which artifacts of kart.lock this machine can load.
    Doctor,
    /// Write the verified, decompressed cubin of an artifact and print its path (for
    /// CuPy `RawModule(path=...)`, cuda-python and other runtimes).
    Path {
        /// The kernel.
        kernel: String,
        /// Param values: -p BLOCK_M=64.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
        params: Vec<(String, ParamValue)>,
        /// The target (default: the one GPU 0 would load).
        #[arg(long)]
        target: Option<TargetArch>,
    },
    /// Download the blobs kart.lock names that the store lacks, checking every byte.
    Fetch {
        /// Only these kernels (default: all).
        kernels: Vec<String>,
        /// Only artifacts for these targets.
        #[arg(long = "target", value_name = "sm_XX")]
        targets: Vec<TargetArch>,
        /// Only what GPU 0 of this machine would load.
        #[arg(long)]
        device: bool,
        /// Parallel transfers.
        #[arg(short, long, default_value_t = 16)]
        jobs: usize,
    },
    /// Upload the blobs and action entries of kart.lock that the remote lacks.
    Push {
        /// Parallel transfers.
        #[arg(short, long, default_value_t = 16)]
        jobs: usize,
    },
    /// Write one self-contained Python module holding selected cubins and a loader
    /// that needs only the CUDA driver (no kart, nvcc, NVRTC or JIT).
    ///
    /// By default each named kernel's `default` config (or its only config) for every
    /// target in kart.lock; KERNEL:NAME=VALUE,… names configs; --all-configs takes all.
    Export {
        /// Kernels and configs: KERNEL or KERNEL:NAME=VALUE,NAME=VALUE (default: every
        /// kernel of kart.lock).
        #[arg(value_name = "KERNEL[:NAME=VALUE,…]")]
        selectors: Vec<kart::export::Selector>,
        /// Write a Python module (the only format).
        #[arg(long, required = true)]
        python: bool,
        /// The file to write.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Only cubins for these targets.
        #[arg(long = "target", value_name = "sm_XX")]
        targets: Vec<TargetArch>,
        /// Every config of each selected kernel.
        #[arg(long)]
        all_configs: bool,
    },
    /// List the tuning records of kart.tune (stale ones marked), or run the kernels'
    /// tuning programs on this GPU.
    Tune {
        /// Only these kernels.
        kernels: Vec<String>,
        /// Run each kernel's `[tune] program` (from the project root) instead.
        #[arg(long)]
        run: bool,
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Remove blobs and entries kart.lock no longer names.
    Gc {
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args)]
struct BuildArgs {
    /// Kernels to build (default: all).
    kernels: Vec<String>,
    /// Only configs with these param values: -p BLOCK_M=64.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, ParamValue)>,
    /// Only these targets (each must be listed in the kernel's targets).
    #[arg(long = "target", value_name = "sm_XX")]
    targets: Vec<TargetArch>,
    /// Parallel nvcc processes (default: the number of cores).
    #[arg(short, long)]
    jobs: Option<usize>,
    /// Seconds before an nvcc run is killed, with every process it started.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    timeout: u64,
    /// Compile nothing: check that every action key equals kart.lock's (exit 1 if not).
    #[arg(long, conflicts_with = "shard")]
    locked: bool,
    /// Build only slice I of N (1-based) of the selection, and write only the store.
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
    /// Replay nvcc's stored warnings for artifacts taken from the store.
    #[arg(short, long)]
    verbose: bool,
    /// Upload what the selection built or took to the remote (HEAD first, then PUT);
    /// a failed upload fails the build.
    #[arg(long, conflicts_with = "no_remote")]
    push: bool,
    /// Do not use the remote at all.
    #[arg(long)]
    no_remote: bool,
    /// Take a trusted remote's action entries without downloading their blobs: for a
    /// CI job that only writes kart.lock.
    #[arg(long)]
    entries_only: bool,
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kart ls | head`), as Unix tools do, instead of
    // panicking in println!.
    // SAFETY: sets a signal disposition at start, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode> {
    let cwd = match &cli.directory {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| Error::Io {
            action: "read the current folder",
            path: PathBuf::from("."),
            source: e,
        })?,
    };
    let project = Project::discover(&cwd)?;
    let lock_timeout = Duration::from_secs(cli.lock_timeout);
    match &cli.command {
        Command::Build(args) => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_build(cli, &ws, args)
        }
        Command::Ls { json } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_ls(&ws, *json)
        }
        Command::Explain {
            kernel,
            params,
            target,
            ptx,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_explain(cli, &ws, kernel, params, *target, *ptx)
        }
        Command::Verify {
            rebuild,
            seed,
            json,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
            let report = maintain::verify(&ws, *rebuild, seed, cli.nvcc.as_deref())?;
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print_verify(&report, *rebuild, seed);
            }
            Ok(if report.clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Smoke {
            allow_no_gpu,
            json,
            all,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            let code = cmd_smoke(cli, &ws, *allow_no_gpu, *json)?;
            if *all && code == ExitCode::SUCCESS && kart::runtime::device_count() > 0 {
                return cmd_attest(cli, &ws);
            }
            Ok(code)
        }
        Command::AttestWorker { digests } => cmd_attest_worker(&project.root, digests),
        Command::Doctor => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_doctor(cli, &ws)
        }
        Command::Path {
            kernel,
            params,
            target,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_path(ws, kernel, params, *target)
        }
        Command::Fetch {
            kernels,
            targets,
            device,
            jobs,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_fetch(cli, &ws, kernels, targets, *device, *jobs)
        }
        Command::Push { jobs } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_push(cli, &ws, *jobs)
        }
        Command::Export {
            selectors,
            python: _,
            output,
            targets,
            all_configs,
        } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_export(cli, &ws, selectors, output, targets, *all_configs)
        }
        Command::Tune { kernels, run, json } => {
            let ws = Workspace::open(project, LockMode::Shared, lock_timeout)?;
            cmd_tune(&ws, kernels, *run, *json)
        }
        Command::Gc { dry_run } => {
            let ws = Workspace::open(project, LockMode::Exclusive, lock_timeout)?;
            let report = maintain::gc(&ws, *dry_run)?;
            let verb = if *dry_run { "would remove" } else { "removed" };
            println!(
                "{verb} {} blobs ({:.1} KiB) and {} action entries not named by kart.lock",
                report.blobs.len(),
                report.bytes as f64 / 1024.0,
                report.entries.len()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Draws build progress: a bar on a terminal, plain lines otherwise, nothing with -q.
struct CliReporter {
    bar: Option<ProgressBar>,
    quiet: bool,
    lines: Mutex<()>,
}

impl CliReporter {
    fn new(quiet: bool) -> CliReporter {
        CliReporter {
            bar: None,
            quiet,
            lines: Mutex::new(()),
        }
    }

    fn say(&self, line: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let _guard = self.lines.lock();
                eprintln!("{line}");
            }
        }
    }
}

impl BuildReporter for CliReporter {
    fn planned(&self, selected: usize, to_compile: usize) {
        if to_compile > 0 {
            self.say(&format!(
                "{selected} artifacts selected, {to_compile} to compile"
            ));
        }
    }

    fn compiled(&self, artifact: &str, result: std::result::Result<Duration, &CompileFailure>) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        match result {
            Ok(elapsed) => {
                if self.bar.is_none() {
                    self.say(&format!(
                        "  compiled {artifact} ({:.1} s)",
                        elapsed.as_secs_f64()
                    ));
                }
            }
            Err(failure) => {
                // Failures are shown in full as they happen, even with --quiet.
                let msg = format!("error: {artifact}: {failure}");
                match &self.bar {
                    Some(bar) => bar.println(msg),
                    None => eprintln!("{msg}"),
                }
            }
        }
    }

    fn note(&self, message: &str) {
        self.say(message);
    }
}

fn cmd_build(cli: &Cli, ws: &Workspace, args: &BuildArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let mut options = BuildOptions {
        selection: Selection {
            kernels: args.kernels.clone(),
            params: args.params.iter().cloned().collect(),
            targets: args.targets.clone(),
        },
        timeout: Duration::from_secs(args.timeout.max(1)),
        locked: args.locked,
        shard: args.shard,
        nvcc: cli.nvcc.clone(),
        lock_timeout: Duration::from_secs(cli.lock_timeout),
        push: args.push,
        entries_only: args.entries_only,
        ..BuildOptions::default()
    };
    if let Some(jobs) = args.jobs {
        if jobs == 0 {
            return Err(Error::usage("--jobs must be at least 1", None));
        }
        options.jobs = jobs;
    }
    if !args.no_remote && !args.locked {
        options.remote = open_remote(cli, ws, 16)?.map(std::sync::Arc::new);
    }
    if options.remote.is_none() && (args.push || args.entries_only) {
        return Err(kart::transfer::no_remote_error());
    }
    let mut reporter = CliReporter::new(cli.quiet);
    let show_bar = !cli.quiet && std::io::stderr().is_terminal() && !args.locked;
    let reporter_ref: &CliReporter = if show_bar {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} compiled, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        reporter.bar = Some(bar);
        &reporter
    } else {
        &reporter
    };
    struct WithBar<'a>(&'a CliReporter);
    impl BuildReporter for WithBar<'_> {
        fn planned(&self, selected: usize, to_compile: usize) {
            if let Some(bar) = &self.0.bar {
                bar.set_length(to_compile as u64);
                if to_compile == 0 {
                    bar.finish_and_clear();
                }
            }
            self.0.planned(selected, to_compile);
        }
        fn compiled(&self, artifact: &str, result: std::result::Result<Duration, &CompileFailure>) {
            self.0.compiled(artifact, result);
        }
        fn note(&self, message: &str) {
            self.0.note(message);
        }
    }
    let result = build(ws, &options, &WithBar(reporter_ref));
    if let Some(bar) = &reporter_ref.bar {
        bar.finish_and_clear();
    }
    let summary = result?;
    if args.verbose {
        replay_warnings(ws, cli.nvcc.as_deref(), &options.selection)?;
    }
    let secs = start.elapsed().as_secs_f64();
    if !cli.quiet {
        if args.locked {
            eprintln!(
                "kart.lock is up to date: {} artifacts checked in {secs:.3} s",
                summary.selected
            );
        } else {
            let lock = match (options.shard, summary.lock_changed) {
                (Some(s), _) => format!("shard {}/{}: kart.lock not written", s.index, s.count),
                (None, true) => format!("kart.lock updated ({} artifacts)", summary.lock_entries.0),
                (None, false) => "kart.lock unchanged".into(),
            };
            let remote = match &options.remote {
                Some(r) if summary.from_remote > 0 || summary.pushed > 0 || args.push => format!(
                    ", {} from the remote ({} blobs downloaded){}",
                    summary.from_remote,
                    summary.downloaded,
                    if args.push {
                        format!(", {} blobs pushed to {}", summary.pushed, r.url())
                    } else {
                        String::new()
                    }
                ),
                _ => String::new(),
            };
            eprintln!(
                "{} artifacts: {} compiled, {} from the store{remote} in {secs:.3} s; {lock}",
                summary.selected, summary.compiled, summary.from_store
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens the remote the command line, environment or kart.toml names, if any.
fn open_remote(cli: &Cli, ws: &Workspace, jobs: usize) -> Result<Option<kart::remote::Remote>> {
    let Some(mut settings) = kart::transfer::remote_settings(&ws.project, cli.remote.as_deref())
    else {
        return Ok(None);
    };
    settings.read_only |= cli.read_only;
    settings.jobs = jobs.max(1);
    let token = std::env::var(kart::remote::TOKEN_ENV).ok();
    kart::remote::Remote::open(&settings, token).map(Some)
}

/// A byte progress bar on a terminal, nothing otherwise.
struct TransferBar(Option<ProgressBar>);

impl TransferBar {
    fn new(quiet: bool, verb: &str) -> TransferBar {
        if quiet || !std::io::stderr().is_terminal() {
            return TransferBar(None);
        }
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {verb} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}), {{msg}} items, eta {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        TransferBar(Some(bar))
    }
}

impl kart::transfer::TransferReporter for TransferBar {
    fn start(&self, items: usize, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(bytes);
            bar.set_message(format!("0/{items}"));
        }
    }
    fn moved(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }
}

impl Drop for TransferBar {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

fn cmd_fetch(
    cli: &Cli,
    ws: &Workspace,
    kernels: &[String],
    targets: &[TargetArch],
    device: bool,
    jobs: usize,
) -> Result<ExitCode> {
    let remote = open_remote(cli, ws, jobs)?.ok_or_else(kart::transfer::no_remote_error)?;
    let lock = Lockfile::read(
        &lock_path(&ws.project.root),
        std::path::Path::new(LOCK_FILE),
    )?
    .ok_or_else(|| {
        Error::usage(
            "no kart.lock: fetch downloads what the lock names",
            Some("commit kart.lock from a build, or run `kart build`".into()),
        )
    })?;
    for k in kernels {
        if !lock.artifacts.iter().any(|a| &a.kernel == k) {
            return Err(Error::usage(format!("kart.lock has no kernel `{k}`"), None));
        }
    }
    let capability = if device {
        Some(kart::runtime::Gpu::open(0)?.capability)
    } else {
        None
    };
    let selected = kart::transfer::fetch_selection(&lock, kernels, targets, capability);
    let start = Instant::now();
    let bar = TransferBar::new(cli.quiet, "fetch");
    let report = kart::transfer::fetch(ws, &remote, &selected, &bar)?;
    drop(bar);
    let secs = start.elapsed().as_secs_f64();
    if !cli.quiet {
        eprintln!(
            "fetch from {}: {} blobs wanted, {} already here, {} downloaded and verified ({:.1} MB in {secs:.2} s, {:.1} MB/s)",
            remote.url(),
            report.wanted,
            report.present,
            report.fetched,
            report.bytes as f64 / 1e6,
            report.bytes as f64 / 1e6 / secs.max(1e-9)
        );
    }
    for why in &report.failed {
        eprintln!("error: {why}");
    }
    if !report.missing.is_empty() {
        eprintln!(
            "error: the remote lacks {} blobs kart.lock names: {}",
            report.missing.len(),
            report.missing.join(", ")
        );
        eprintln!("hint: run `kart push` where they were built, or `kart build` here");
    }
    Ok(if report.failed.is_empty() && report.missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_export(
    cli: &Cli,
    ws: &Workspace,
    selectors: &[kart::export::Selector],
    output: &std::path::Path,
    targets: &[TargetArch],
    all_configs: bool,
) -> Result<ExitCode> {
    let lock_file = lock_path(&ws.project.root);
    let lock = Lockfile::read(&lock_file, std::path::Path::new(LOCK_FILE))?.ok_or_else(|| {
        Error::usage(
            "no kart.lock: export writes what the lock names",
            Some("run `kart build` first".into()),
        )
    })?;
    let options = kart::export::ExportOptions {
        selectors: selectors.to_vec(),
        targets: targets.to_vec(),
        all_configs,
    };
    let tune_path = ws.project.root.join(kart::tune::TUNE_FILE);
    let tune = kart::tune::TuneFile::read(&tune_path, std::path::Path::new(kart::tune::TUNE_FILE))?;
    let chosen = kart::export::select(&ws.project, &lock, &tune, &options)?;
    let lock_sha = kart::digest::sha256_file(&lock_file)?;
    let command: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect();
    let text = kart::export::python_module(
        &ws.store,
        &ws.project,
        &tune,
        &chosen,
        &lock_sha,
        &format!("kart {}", command.join(" ")),
    )?;
    kart::fsutil::write_atomic(output, text.as_bytes())?;
    if !cli.quiet {
        eprintln!(
            "wrote {} ({} cubins, {:.1} KiB)",
            output.display(),
            chosen.len(),
            text.len() as f64 / 1024.0
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_tune(ws: &Workspace, kernels: &[String], run: bool, json: bool) -> Result<ExitCode> {
    for k in kernels {
        ws.project.kernel(k)?;
    }
    let wanted = |name: &str| kernels.is_empty() || kernels.iter().any(|k| k == name);
    if run {
        let mut failed = false;
        for kernel in ws.project.kernels.iter().filter(|k| wanted(&k.name)) {
            let Some(program) = kernel
                .tune
                .as_ref()
                .map(|t| &t.program)
                .filter(|p| !p.is_empty())
            else {
                continue;
            };
            eprintln!("tune: {}: running {}", kernel.name, program.join(" "));
            let status = std::process::Command::new(&program[0])
                .args(&program[1..])
                .current_dir(&ws.project.root)
                .status()
                .at("run the tuning program", std::path::Path::new(&program[0]))?;
            failed |= !status.success();
        }
        return Ok(if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let path = ws.project.root.join(kart::tune::TUNE_FILE);
    let tune = kart::tune::TuneFile::read(&path, std::path::Path::new(kart::tune::TUNE_FILE))?;
    let lock = ws.lock()?;
    let records: Vec<&kart::tune::TuneRecord> =
        tune.records.iter().filter(|r| wanted(&r.kernel)).collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&records).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:12} {:16} {:44} {:>10}  {:52} STALE",
        "KERNEL", "GPU", "PROBLEM", "MEDIAN µs", "CONFIG"
    );
    for r in records {
        let stale = !lock
            .artifacts
            .iter()
            .any(|a| a.digest == r.digest && a.config == r.config && a.kernel == r.kernel);
        let problem: Vec<String> = r.problem.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{:12} {:16} {:44} {:>10.1}  {:52} {}",
            r.kernel,
            r.gpu.strip_prefix("NVIDIA ").unwrap_or(&r.gpu),
            problem.join(","),
            r.median_us,
            r.config.to_string(),
            if stale { "yes" } else { "-" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_push(cli: &Cli, ws: &Workspace, jobs: usize) -> Result<ExitCode> {
    let remote = open_remote(cli, ws, jobs)?.ok_or_else(kart::transfer::no_remote_error)?;
    let lock = ws.lock()?;
    let start = Instant::now();
    let bar = TransferBar::new(cli.quiet, "push");
    let report = kart::transfer::push(ws, &remote, &lock, &bar)?;
    drop(bar);
    if !cli.quiet {
        eprintln!(
            "push to {}: {} blobs uploaded ({:.1} MB), {} already there; {} action entries uploaded, {} already there, in {:.2} s",
            remote.url(),
            report.blobs_uploaded,
            report.bytes as f64 / 1e6,
            report.blobs_present,
            report.entries_uploaded,
            report.entries_present,
            start.elapsed().as_secs_f64()
        );
        if !report.not_local.is_empty() {
            eprintln!(
                "note: {} blobs of kart.lock are not in the local store and were not pushed",
                report.not_local.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn replay_warnings(
    ws: &Workspace,
    nvcc: Option<&std::path::Path>,
    selection: &Selection,
) -> Result<()> {
    let toolchain = ws.toolchain(nvcc)?;
    let planned = ws.plan(&toolchain)?;
    for p in ws.select(&planned, selection)? {
        if let Ok(Some(entry)) = ws.store.get_entry(&p.key) {
            let warnings: Vec<&str> = entry
                .stderr
                .lines()
                .filter(|l| {
                    !l.starts_with("ptxas info") && !l.starts_with("    ") && !l.trim().is_empty()
                })
                .collect();
            if !warnings.is_empty() {
                eprintln!("{} {}:", entry.kernel, entry.config);
                for w in warnings {
                    eprintln!("  {w}");
                }
            }
        }
    }
    Ok(())
}

fn cmd_ls(ws: &Workspace, json: bool) -> Result<ExitCode> {
    let rows = maintain::list(ws)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let cfg_width = rows
        .iter()
        .map(|r| r.config.to_string().len())
        .max()
        .unwrap_or(6)
        .max(6);
    let kernel_width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:kernel_width$}  {:cfg_width$}  {:8}  {:>9}  {:>4}  {:>7}  {:>6}  {:5}  ATTESTED",
        "KERNEL", "CONFIG", "TARGET", "SIZE", "REGS", "SMEM", "SPILLS", "LOCAL"
    );
    for r in &rows {
        let target = if r.kind == "ptx" {
            format!("{} ptx", r.target)
        } else {
            r.target.clone()
        };
        println!(
            "{:kernel_width$}  {:cfg_width$}  {:8}  {:>9}  {:>4}  {:>7}  {:>6}  {:5}  {}",
            r.kernel,
            r.config.to_string(),
            target,
            r.size,
            r.registers,
            r.shared_bytes,
            r.spill_bytes,
            if r.local { "yes" } else { "no" },
            if r.attested.is_empty() {
                "-".to_string()
            } else {
                r.attested.join(",")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_explain(
    cli: &Cli,
    ws: &Workspace,
    kernel_name: &str,
    params: &[(String, ParamValue)],
    target: Option<TargetArch>,
    ptx: bool,
) -> Result<ExitCode> {
    let kernel = ws.project.kernel(kernel_name)?;
    let config = Config(params.iter().cloned().collect());
    let missing: Vec<&String> = kernel
        .params
        .keys()
        .filter(|k| !config.0.contains_key(*k))
        .collect();
    let unknown: Vec<&String> = config
        .0
        .keys()
        .filter(|k| !kernel.params.contains_key(*k))
        .collect();
    if !missing.is_empty() || !unknown.is_empty() {
        return Err(Error::usage(
            format!("explain needs one value for each param of `{kernel_name}`"),
            Some(format!(
                "missing: {}; unknown: {}; params: {}",
                list(&missing),
                list(&unknown),
                kernel.params.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        ));
    }
    if !kernel.configs().contains(&config) {
        return Err(Error::usage(
            format!(
                "{config} is not a config of `{kernel_name}` (a value is not in the grid, or it is excluded)"
            ),
            None,
        ));
    }
    let target = target.unwrap_or(kernel.targets[0]);
    let kind = if ptx {
        ArtifactKind::Ptx
    } else {
        ArtifactKind::Cubin
    };
    let toolchain = ws.toolchain(cli.nvcc.as_deref())?;
    let files = kernel_input_files(&ws.project.root, kernel)?;
    let preimage = action_preimage(&toolchain, kernel, &config, target, kind, &files);
    let key = action_key(&preimage);
    println!(
        "{}",
        describe(kernel_name, &config, &target.to_string(), kind)
    );
    println!("action key {key}");
    for (name, value) in &preimage.0 {
        let value = value.lines().collect::<Vec<_>>().join(" | ");
        println!("  {name}: {value}");
    }
    let lock = ws.lock()?;
    match lock.find(kernel_name, &config, &target.to_string(), kind) {
        None => println!("not in kart.lock"),
        Some(a) if a.key == key => println!("matches kart.lock (blob {})", a.digest),
        Some(a) => {
            println!("differs from kart.lock (locked key {}):", a.key);
            for line in explain_change(ws, &a.key, &preimage) {
                println!("  {line}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list(items: &[&String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn print_verify(report: &maintain::VerifyReport, rebuild: usize, seed: u64) {
    println!(
        "{} blobs ok, {} corrupt; {} action entries ok, {} corrupt; {} locked blobs not in the store",
        report.blobs_ok,
        report.blobs_corrupt.len(),
        report.entries_ok,
        report.entries_corrupt.len(),
        report.missing.len()
    );
    for d in &report.blobs_corrupt {
        println!("corrupt blob {d} (quarantined)");
    }
    for k in &report.entries_corrupt {
        println!("corrupt action entry {k} (quarantined)");
    }
    if rebuild > 0 {
        println!(
            "rebuilt {} artifacts (seed {seed}): {} differ from kart.lock",
            report.rebuilt,
            report.rebuild_mismatches.len()
        );
        for (what, locked, rebuilt) in &report.rebuild_mismatches {
            println!("nondeterministic: {what}: lock {locked}, rebuilt {rebuilt}");
        }
    }
}

fn cmd_smoke(cli: &Cli, ws: &Workspace, allow_no_gpu: bool, json: bool) -> Result<ExitCode> {
    let fallback = ws.project.targets[0];
    let report =
        kart::smoke::run_smoke(&ws.store, cli.nvcc.as_deref(), &ws.project.root, fallback)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        for s in &report.stages {
            println!("{:10} {:9.3} ms  {}", s.stage, s.ms, s.detail);
        }
    }
    if report.skipped_no_gpu {
        println!("skipped: no CUDA GPU (load and launch stages not run)");
        return Ok(if allow_no_gpu {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(3)
        });
    }
    println!("smoke: ok on {}", report.gpu.unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

fn cmd_attest(cli: &Cli, ws: &Workspace) -> Result<ExitCode> {
    use kart::attest::{ATTEST_FILE, AttestFile, Outcome, check_in_children, loadable_cubins};
    let lock = ws.lock()?;
    let gpu = kart::runtime::Gpu::open(0)?;
    let candidates = loadable_cubins(&lock, gpu.capability);
    println!(
        "attest: {} of {} artifacts of kart.lock are cubins {} can run",
        candidates.len(),
        lock.artifacts.len(),
        gpu.name
    );
    let exe =
        std::env::current_exe().at("find the kart executable", std::path::Path::new("kart"))?;
    let outcomes = check_in_children(&candidates, |digests| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("-C")
            .arg(&ws.project.root)
            .arg("--lock-timeout")
            .arg(cli.lock_timeout.to_string())
            .arg("attest-worker")
            .args(digests);
        cmd
    })?;
    let mut records = Vec::new();
    let mut failed = 0;
    for (artifact, outcome) in candidates.iter().zip(outcomes) {
        match outcome {
            Outcome::Passed(check) => {
                println!("  {:?}  {}", check, artifact.describe());
                records.push(kart::attest::record(artifact, &gpu, check));
            }
            Outcome::Failed(why) | Outcome::Crashed(why) => {
                failed += 1;
                println!("  FAILED  {}: {why}", artifact.describe());
            }
        }
    }
    let path = ws.project.root.join(ATTEST_FILE);
    let mut file = AttestFile::read(&path, std::path::Path::new(ATTEST_FILE))?;
    let passed = records.len();
    file.merge(records, &lock);
    let changed = file.write(&path)?;
    println!(
        "attest: {passed} passed, {failed} failed on {}; {ATTEST_FILE} {}",
        gpu.name,
        if changed { "updated" } else { "unchanged" }
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_attest_worker(root: &std::path::Path, digests: &[String]) -> Result<ExitCode> {
    use std::io::Write;
    let rt = kart::runtime::Runtime::open(root)?;
    let gpu = kart::runtime::Gpu::open(0)?;
    let mut out = std::io::stdout().lock();
    for digest in digests {
        kart::failpoint::hit("attest-worker", digest);
        let report = kart::attest::check_blob(&rt, &gpu, digest);
        let line = serde_json::to_string(&report).unwrap_or_default();
        // The parent reads each line as it comes; a lost stdout ends the work.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_doctor(cli: &Cli, ws: &Workspace) -> Result<ExitCode> {
    use kart::resolve::{Capability, cubin_fit, format_cuda_version, required_driver_version};
    match ws.toolchain(cli.nvcc.as_deref()) {
        Ok(tc) => println!("nvcc: {} at {}", tc.release, tc.nvcc.display()),
        Err(e) => println!("nvcc: {e}"),
    }
    let driver = kart::runtime::driver_version();
    match &driver {
        Ok(v) => println!("driver: supports CUDA {}", format_cuda_version(*v)),
        Err(e) => println!("driver: {e}"),
    }
    let mut gpus: Vec<(String, Capability)> = Vec::new();
    for i in 0..kart::runtime::device_count() {
        match kart::runtime::Gpu::open(i) {
            Ok(g) => {
                println!(
                    "gpu {i}: {} (compute capability {}): runs cubins for sm_{}{}{}",
                    g.name,
                    g.capability,
                    g.capability.major,
                    if g.capability.minor > 0 {
                        format!("0..sm_{}{}", g.capability.major, g.capability.minor)
                    } else {
                        "0".into()
                    },
                    if g.capability.major >= 9 {
                        format!(", sm_{}{}a", g.capability.major, g.capability.minor)
                    } else {
                        String::new()
                    }
                );
                gpus.push((g.name.clone(), g.capability));
            }
            Err(e) => println!("gpu {i}: {e}"),
        }
    }
    if gpus.is_empty() {
        println!("gpus: none");
    }
    let lock = ws.lock()?;
    println!("kart.lock: {} artifacts", lock.artifacts.len());
    for (name, cap) in &gpus {
        let mut loadable = 0;
        for a in &lock.artifacts {
            let Ok(target) = a.target.parse::<TargetArch>() else {
                continue;
            };
            let why_not = if a.kind == ArtifactKind::Ptx {
                Some("PTX: loads only with an explicit JIT policy".to_string())
            } else if cubin_fit(target, *cap).is_none() {
                Some(if target.major != cap.major {
                    format!(
                        "{target} is for compute capability {}.x (never across majors)",
                        target.major
                    )
                } else if target.variant == kart::target::ArchVariant::Specific {
                    format!(
                        "{target} runs only on exactly {}.{}",
                        target.major, target.minor
                    )
                } else {
                    format!("{target} needs minor {} or higher", target.minor)
                })
            } else if let (Ok(v), Some(req)) = (&driver, required_driver_version(&a.nvcc))
                && *v < req
            {
                Some(format!("built by nvcc {}, the driver is too old", a.nvcc))
            } else if !ws.store.has_blob(&a.digest) {
                Some("blob not in the local store (kart build or kart fetch)".into())
            } else {
                None
            };
            match why_not {
                None => loadable += 1,
                Some(why) if cli.quiet => drop(why),
                Some(why) => println!("  {name}: cannot load {}: {why}", a.describe()),
            }
        }
        println!(
            "{name}: {loadable} of {} artifacts loadable",
            lock.artifacts.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_path(
    ws: Workspace,
    kernel: &str,
    params: &[(String, ParamValue)],
    target: Option<TargetArch>,
) -> Result<ExitCode> {
    let config = Config(params.iter().cloned().collect());
    let lock = ws.lock()?;
    let artifact = match target {
        Some(t) => lock
            .find(kernel, &config, &t.to_string(), ArtifactKind::Cubin)
            .cloned()
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
            let rt = kart::runtime::Runtime::from_parts(lock.clone(), ws.store);
            let a = rt
                .select(
                    kernel,
                    &config,
                    gpu.capability,
                    kart::resolve::JitPolicy::Forbid,
                )?
                .clone();
            return write_materialized(rt.store(), &a);
        }
    };
    write_materialized(&ws.store, &artifact)
}

fn write_materialized(
    store: &kart::store::Store,
    a: &kart::lockfile::LockedArtifact,
) -> Result<ExitCode> {
    let path = store
        .materialized_dir()
        .join(format!("{}.{}", a.digest, a.kind));
    let up_to_date = std::fs::read(&path).is_ok_and(|b| kart::digest::sha256_hex(&b) == a.digest);
    if !up_to_date {
        let bytes = store.read_blob(&a.digest, Some(a.size))?;
        kart::fsutil::write_atomic(&path, &bytes)?;
    }
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}
