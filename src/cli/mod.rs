//! The `kart` command line: the arguments (their doc comments are `--help`), one
//! module per command, and the few helpers they share. Every command is a thin layer:
//! it calls the library and prints what it returns (data on stdout, messages on
//! stderr, JSON with `--json`).

mod build;
pub mod complete;
mod doctor;
mod explain;
mod export;
mod fleet;
mod gc;
mod init;
mod ls;
mod path;
mod progress;
mod smoke;
mod toolchain;
mod transfer;
mod tune;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCandidates;

use kart::error::{Error, Result};
use kart::model::ParamValue;
use kart::model::parse_param;
use kart::pipeline::Shard;
use kart::project::Project;
use kart::store::LockMode;
use kart::target::TargetArch;
use kart::workspace::Workspace;

/// The help heading of the options every command takes.
const GLOBAL: &str = "Options of every command";
/// The help heading of the remote cache's options (every command that talks to it).
const REMOTE: &str = "Remote cache";

/// kart (kernel artifacts): compile every config of your CUDA kernels to cubin offline,
/// keep them by content, load them at run time with no JIT.
#[derive(Parser)]
#[command(name = "kart", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Run as if started in this folder (kart.toml is searched from here upwards).
    #[arg(short = 'C', long, global = true, help_heading = GLOBAL, value_name = "DIR")]
    pub directory: Option<PathBuf>,
    /// nvcc to use (default: KART_NVCC, .toolchain/, kart's home as `kart toolchain install`
    /// filled it, CUDA_HOME, CUDA_PATH, PATH).
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "PATH", env = "KART_NVCC")]
    pub nvcc: Option<PathBuf>,
    /// Print nothing but data and errors.
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,
    /// Seconds to wait for another kart process holding the store.
    #[arg(long, global = true, help_heading = GLOBAL, default_value_t = 60, value_name = "SECONDS")]
    pub lock_timeout: u64,
    /// The remote cache (default: kart.toml's [remote] url). http://, https://, file://
    /// or s3://bucket/prefix (also gs://, az://); the bearer token comes from
    /// KART_REMOTE_TOKEN, an object store's credentials from AWS_* (KART_REMOTE_ANONYMOUS=1:
    /// unsigned, read-only).
    #[arg(long, global = true, help_heading = REMOTE, value_name = "URL", env = "KART_REMOTE")]
    pub remote: Option<String>,
    /// Never write to the remote.
    #[arg(long, global = true, help_heading = REMOTE)]
    pub read_only: bool,
    /// Seconds to wait for a connection to the remote (default 3; kart.toml
    /// `[remote] connect_timeout`).
    #[arg(long, global = true, help_heading = REMOTE, value_name = "SECONDS", value_parser = parse_seconds)]
    pub connect_timeout: Option<Duration>,
    /// Seconds to wait for the first byte of the remote's answer (default 5;
    /// `[remote] first_byte_timeout`).
    #[arg(long, global = true, help_heading = REMOTE, value_name = "SECONDS", value_parser = parse_seconds)]
    pub first_byte_timeout: Option<Duration>,
    /// Seconds in which a transfer must move at least 1 KiB (default 5;
    /// `[remote] stall_timeout`). After any timeout the remote is given up for the run.
    #[arg(long, global = true, help_heading = REMOTE, value_name = "SECONDS", value_parser = parse_seconds)]
    pub stall_timeout: Option<Duration>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Compile every missing artifact of the selection and write kart.lock.
    ///
    /// Takes each artifact from the store when its action key is there, else compiles
    /// it. The first build with a new toolchain compiles the built-in smoke kernel
    /// first and stops within seconds if nvcc cannot build it.
    Build(BuildArgs),
    /// List the artifacts of kart.lock with their resources.
    ///
    /// CONFIG shows the params whose value differs between a kernel's listed rows
    /// (all of them when none does); --wide gives every param and derived param a
    /// column of its own, one table per kernel.
    Ls {
        /// Only these kernels (default: all).
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
        kernels: Vec<String>,
        /// Only configs with these param values: -p BLOCK_M=64.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
        params: Vec<(String, ParamValue)>,
        /// One column per param and derived param, one table per kernel.
        #[arg(long, conflicts_with = "json")]
        wide: bool,
        /// One JSON array on stdout (every param and derived param of each row).
        #[arg(long)]
        json: bool,
    },
    /// Show every input of an artifact's action key and what changed against the lock.
    Explain {
        /// The kernel.
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
        kernel: String,
        /// Param values (all params of the kernel): -p BLOCK_M=64 -p NUM_WARPS=4.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
        params: Vec<(String, ParamValue)>,
        /// The target (default: the kernel's first).
        #[arg(long)]
        target: Option<TargetArch>,
        /// Explain the PTX artifact instead of the cubin.
        #[arg(long)]
        ptx: bool,
        /// The key, its inputs and the lock's verdict as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every blob and entry of the store; quarantine corrupt ones (exit 1).
    Verify {
        /// Also recompile N artifacts of the lock (`all` for every one), sampled, in
        /// parallel, and compare digests: an independent rebuild on another machine.
        #[arg(long, value_name = "N|all", default_value = "0", value_parser = parse_rebuild)]
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
    ///
    /// One line per reason an artifact cannot load, with a count; -v lists every
    /// artifact, --json gives everything.
    Doctor {
        /// List every artifact under its reason, and every pick.
        #[arg(short, long)]
        verbose: bool,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write the verified, decompressed cubin of an artifact and print its path (for
    /// CuPy `RawModule(path=...)`, cuda-python and other runtimes).
    Path {
        /// The kernel.
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
        kernel: String,
        /// Param values: -p BLOCK_M=64.
        #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
        params: Vec<(String, ParamValue)>,
        /// The target (default: the one GPU 0 would load).
        #[arg(long)]
        target: Option<TargetArch>,
        /// Print JSON: the path, the digest and each entry's name, symbol (the mangled
        /// name of a template entry, for `cuModuleGetFunction`) and instance.
        #[arg(long)]
        json: bool,
    },
    /// Download the blobs kart.lock names that the store lacks, checking every byte.
    Fetch {
        /// Only these kernels (default: all).
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
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
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Upload the blobs and action entries of kart.lock that the remote lacks.
    Push {
        /// Parallel transfers.
        #[arg(short, long, default_value_t = 16)]
        jobs: usize,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write one self-contained Python module holding selected cubins and a loader
    /// that needs only the CUDA driver (no kart, nvcc, NVRTC or JIT).
    ///
    /// By default each named kernel's `default` config (or its only config) for every
    /// target in kart.lock; KERNEL:NAME=VALUE,… names configs; --all-configs takes all.
    /// A kernel named without params brings its variants (kernels whose `variant_of`
    /// names it), so the module's best() can choose among them.
    Export {
        /// Kernels and configs: KERNEL or KERNEL:NAME=VALUE,NAME=VALUE (default: every
        /// kernel of kart.lock).
        #[arg(value_name = "KERNEL[:NAME=VALUE,…]", add = ArgValueCandidates::new(complete::kernels))]
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
        /// Only the cubins the GPUs of this fleet file load (`[[fleet]]` tables, as for
        /// `kart coverage`).
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
    },
    /// Will every GPU of the fleet load a cubin, a tuned config and an attested blob
    /// for every kernel, with no compile? A table per kernel and GPU.
    ///
    /// CUBIN: of the kernel's configs, how many load a cubin on the GPU (exact: built
    /// for its capability; compatible: same major, lower minor), and how many would
    /// need PTX JIT, a newer driver, or have nothing. TUNED: kart.tune's records for
    /// the GPU, and for listed problems (--problems, --trace) how many best() answers
    /// from a record of their own. ATTESTED: the blobs it loads that kart.attest
    /// proved on it. The fleet: --fleet FILE, else kart.toml's [[fleet]], else the GPUs
    /// kart.attest and kart.tune name.
    Coverage {
        /// Only these kernels (default: every kernel of kart.lock).
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
        kernels: Vec<String>,
        /// The fleet: a file of `[[fleet]]` tables (name, capability, driver or cuda).
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
        /// Problems to check best() on: `[[problem]]` tables of `kernel` and integer keys.
        #[arg(long, value_name = "FILE")]
        problems: Option<PathBuf>,
        /// The problems a workload met, from its trace (KART_TRACE).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Exit 1 if any kernel misses one of these on any GPU: cubin, tuned, attested.
        #[arg(long, value_name = "NEED,…", value_delimiter = ',')]
        require: Vec<kart::deploy::coverage::Need>,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Write one file holding exactly what the fleet's GPUs load (the cubins, their
    /// lock records, the tuning and attestation records naming them), each blob
    /// checked; a program loads from it with KART_BUNDLE=FILE.
    ///
    /// With --trace, only the configs the traced workload launched or best() chose
    /// (on every GPU of the fleet), and each kernel's default.
    Bundle {
        /// Only these kernels (default: every kernel of kart.lock).
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
        kernels: Vec<String>,
        /// The file to write.
        #[arg(short, long, value_name = "FILE", required_unless_present = "inspect")]
        output: Option<PathBuf>,
        /// The fleet: a file of `[[fleet]]` tables (default: kart.toml's, else the GPUs
        /// of kart.attest and kart.tune).
        #[arg(long, value_name = "FILE")]
        fleet: Option<PathBuf>,
        /// Keep only the configs a workload used, from its trace (KART_TRACE).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// List a bundle's contents and sizes by kernel and target (checking every
        /// blob) instead.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["output", "fleet", "trace", "kernels"])]
        inspect: Option<PathBuf>,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// List the tuning records of kart.tune (stale ones marked), or run the kernels'
    /// tuning programs on this GPU.
    Tune {
        /// Only these kernels.
        #[arg(add = ArgValueCandidates::new(complete::kernels))]
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
        /// Run even without a kart.lock, which then names nothing: everything in the
        /// store goes.
        #[arg(long)]
        all_unreferenced: bool,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Install, list, locate or remove the nvcc releases, toolkit components and header
    /// libraries kart.toml pins, in kart's home (KART_HOME, else ~/.cache/kart), shared
    /// by every project.
    Toolchain {
        #[command(subcommand)]
        action: ToolchainAction,
    },
    /// Start a kart project in DIR (default: the current folder): kart.toml with the
    /// pinned nvcc, the smoke kernel under kernels/, .gitignore lines and a CI workflow.
    /// In a folder that already has a kart.toml it changes nothing and says so.
    Init {
        /// The folder (created if missing).
        dir: Option<PathBuf>,
    },
    /// Print the shell code that completes kart's commands, flags, and the kernel and
    /// param names of the project you are in. It calls kart as you type, so load it
    /// when the shell starts rather than saving it: `source <(kart completions bash)`
    /// in ~/.bashrc (zsh: ~/.zshrc; fish: `kart completions fish | source` in
    /// ~/.config/fish/config.fish).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
pub enum ToolchainAction {
    /// Download, check and unpack what kart.toml pins ([toolchain] nvcc and components,
    /// [library.*] pip), each only if it is not installed yet.
    Install {
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Every install in kart's home: what it holds (components, library pin), its size,
    /// and which projects used it last and when; `*` marks this project's.
    List {
        /// One JSON array on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print the folder of this project's installed toolchain; `path nvcc`: nvcc
    /// itself; `path NAME`: the installed folder of the header library `[library.NAME]`.
    Path {
        /// `nvcc`, or the name of a `[library.NAME]` of kart.toml.
        what: Option<String>,
    },
    /// Remove the installs no project has used for a while (--unused-for) and those
    /// named, never the ones this project pins, and leftovers of interrupted installs.
    /// A project uses an install when it resolves its toolchain (a build, doctor,
    /// `toolchain install` or `toolchain path`).
    Gc {
        /// Installs to remove whenever they were last used: folder names as `kart
        /// toolchain list` shows them (`13.0-2d504bf03c2c877e`), or paths.
        installs: Vec<String>,
        /// Remove installs no project has used for this many days.
        #[arg(long, value_name = "DAYS", default_value_t = 30)]
        unused_for: u64,
        /// Only say what would be removed, and why.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args)]
pub struct BuildArgs {
    /// Kernels to build (default: all).
    #[arg(add = ArgValueCandidates::new(complete::kernels))]
    pub kernels: Vec<String>,
    /// Only configs with these param values: -p BLOCK_M=64.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
    pub params: Vec<(String, ParamValue)>,
    /// Only these targets (each must be listed in the kernel's targets).
    #[arg(long = "target", value_name = "sm_XX")]
    pub targets: Vec<TargetArch>,
    /// Parallel nvcc processes (default: the number of cores).
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Seconds before an nvcc run is killed, with every process it started.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub timeout: u64,
    /// Compile nothing: for each selected kernel, say how many raw combinations its
    /// params make (those with the -p values), how many `[[exclude]]` and each
    /// `require` rule remove, and how many configs remain.
    #[arg(long, conflicts_with_all = ["locked", "shard", "push"])]
    pub explain_grid: bool,
    /// Compile nothing: check that every action key equals kart.lock's (exit 1 if not).
    #[arg(long, conflicts_with = "shard")]
    pub locked: bool,
    /// Stop starting compiles at the first failure (those running finish).
    #[arg(long, conflicts_with_all = ["locked", "explain_grid"])]
    pub fail_fast: bool,
    /// Configs over a resource limit do not fail the build: the `require` rule that
    /// excludes exactly them is added to their kernel.toml and the rest is locked.
    #[arg(long, conflicts_with_all = ["locked", "explain_grid", "shard"])]
    pub skip_infeasible: bool,
    /// Keep each failing compile's folder (the unit kart generates for template
    /// entries, nvcc's command line as nvcc.sh, its output) in the store's kept/
    /// folder, and print where; `kart gc` removes them.
    #[arg(long, conflicts_with_all = ["locked", "explain_grid"])]
    pub keep_temps: bool,
    /// Configs of a template kernel compiled through one nvcc front-end pass, each then
    /// cut out and assembled alone (the same bytes as a compile alone). Default: enough
    /// batches for every core, at most 8 configs each and what the free memory holds
    /// (about 400 MB per config); 1 compiles every config alone.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub batch: Option<u16>,
    /// Build only slice I of N (1-based) of the selection, and write only the store.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// The summary (counts, whether kart.lock changed), or with --explain-grid each
    /// kernel's report, as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Replay nvcc's stored warnings for artifacts taken from the store.
    #[arg(short, long)]
    pub verbose: bool,
    /// Upload what the selection built or took to the remote (HEAD first, then PUT);
    /// a failed upload fails the build.
    #[arg(long, conflicts_with = "no_remote")]
    pub push: bool,
    /// Do not use the remote at all.
    #[arg(long)]
    pub no_remote: bool,
    /// Take a trusted remote's action entries without downloading their blobs: for a
    /// CI job that only writes kart.lock.
    #[arg(long)]
    pub entries_only: bool,
    /// Compile on a Remote Execution API (REAPI v2) server such as BuildGrid or
    /// Buildbarn: `grpc://HOST:PORT[/INSTANCE]` (`grpcs://` for TLS). Overrides
    /// `[executor] url` of kart.toml. Each compile runs there with the pinned toolkit
    /// sent along; one the executor cannot run is compiled here, with one warning, and
    /// the bytes are the same either way. --jobs is then how many are sent at once
    /// (default `[executor] jobs`, 64).
    #[arg(long, value_name = "URL", env = "KART_EXECUTOR", conflicts_with_all = ["locked", "explain_grid"])]
    pub executor: Option<String>,
    /// Compile here, even when kart.toml names an executor.
    #[arg(long, conflicts_with = "executor")]
    pub no_executor: bool,
    /// Seconds to wait for one compile's result from the executor before compiling it
    /// here (default `[executor] timeout`, else --timeout plus two minutes).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub executor_timeout: Option<Duration>,
}

/// A positive number of seconds (`5`, `0.5`).
fn parse_seconds(s: &str) -> std::result::Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "`{s}` is not a number of seconds above 0 (at most a day)"
        )),
    }
}

/// Runs the parsed command line.
pub fn run(cli: &Cli) -> Result<ExitCode> {
    if let Command::Completions { shell } = &cli.command {
        return complete::registration(*shell);
    }
    let cwd = match &cli.directory {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| Error::Io {
            action: "read the current folder",
            path: PathBuf::from("."),
            source: e,
        })?,
    };
    if let Command::Init { dir } = &cli.command {
        return init::run(
            &cwd.join(dir.as_deref().unwrap_or(std::path::Path::new("."))),
            cli.quiet,
        );
    }
    if let Command::Toolchain {
        action: ToolchainAction::List { json },
    } = &cli.command
    {
        // Works anywhere: inside a project it also marks the project's installs.
        let project = Project::discover(&cwd).ok();
        return toolchain::list(project.as_ref(), *json);
    }
    if let Command::Bundle {
        inspect: Some(path),
        json,
        ..
    } = &cli.command
    {
        // Works anywhere: a bundle is read where it is deployed, with no project.
        return fleet::inspect(&cwd.join(path), path, *json);
    }
    let project = Project::discover(&cwd)?;
    if let Command::Toolchain { action } = &cli.command {
        return toolchain::run(cli, &project, action);
    }
    if let Command::AttestWorker { digests } = &cli.command {
        return smoke::attest_worker(&project.root, digests);
    }
    let broken = match named_kernels(&cli.command) {
        None => project.broken.clone(),
        Some(names) => {
            // A command about a kernel that could not be read says why.
            if let Some(b) = names.iter().find_map(|n| project.broken_kernel(n)) {
                return Err(b.error.clone());
            }
            Vec::new()
        }
    };
    if !broken.is_empty()
        && let Command::Build(args) = &cli.command
        && args.locked
    {
        // `--locked` cannot check what it cannot read.
        return Err(broken[0].error.clone());
    }
    let mode = match cli.command {
        Command::Gc { .. } => LockMode::Exclusive,
        _ => LockMode::Shared,
    };
    let ws = Workspace::open(project, mode, Duration::from_secs(cli.lock_timeout))?;
    let result = run_command(cli, ws);
    if broken.is_empty() {
        return result;
    }
    match result {
        Ok(ExitCode::SUCCESS) => report_broken(&broken),
        // The command failed too: the broken kernels first, they may be why.
        other => {
            for b in &broken {
                print_error(&b.error);
            }
            other
        }
    }
}

/// Runs a command that needs the project's store.
fn run_command(cli: &Cli, workspace: Workspace) -> Result<ExitCode> {
    let ws = &workspace;
    match &cli.command {
        Command::Build(args) => build::run(cli, ws, args),
        Command::Ls {
            kernels,
            params,
            wide,
            json,
        } => ls::run(ws, kernels, params, *wide, *json),
        Command::Explain {
            kernel,
            params,
            target,
            ptx,
            json,
        } => explain::run(cli, ws, kernel, params, *target, *ptx, *json),
        Command::Verify {
            rebuild,
            seed,
            json,
        } => verify::run(cli, ws, *rebuild, *seed, *json),
        Command::Smoke {
            allow_no_gpu,
            json,
            all,
        } => {
            let code = smoke::run(cli, ws, *allow_no_gpu, *json)?;
            if *all && code == ExitCode::SUCCESS && kart::runtime::device_count() > 0 {
                return smoke::attest(cli, ws);
            }
            Ok(code)
        }
        Command::Doctor { verbose, json } => doctor::run(cli, ws, *verbose, *json),
        Command::Path {
            kernel,
            params,
            target,
            json,
        } => path::run(workspace, kernel, params, *target, *json),
        Command::Fetch {
            kernels,
            targets,
            device,
            jobs,
            json,
        } => transfer::fetch(cli, ws, kernels, targets, *device, *jobs, *json),
        Command::Push { jobs, json } => transfer::push(cli, ws, *jobs, *json),
        Command::Export {
            selectors,
            python: _,
            output,
            targets,
            all_configs,
            fleet,
        } => export::run(
            cli,
            ws,
            selectors,
            output,
            targets,
            *all_configs,
            fleet.as_deref(),
        ),
        Command::Coverage {
            kernels,
            fleet,
            problems,
            trace,
            require,
            json,
        } => fleet::coverage(
            ws,
            &fleet::CoverageArgs {
                kernels,
                fleet: fleet.as_deref(),
                problems: problems.as_deref(),
                trace: trace.as_deref(),
                require,
                json: *json,
            },
        ),
        Command::Bundle {
            kernels,
            output,
            fleet,
            trace,
            json,
            ..
        } => fleet::bundle(
            ws,
            &fleet::BundleArgs {
                kernels,
                output: output.as_deref(),
                fleet: fleet.as_deref(),
                trace: trace.as_deref(),
                json: *json,
                quiet: cli.quiet,
            },
        ),
        Command::Tune { kernels, run, json } => tune::run(ws, kernels, *run, *json),
        Command::Gc {
            dry_run,
            json,
            all_unreferenced,
        } => gc::run(ws, *dry_run, *all_unreferenced, *json),
        Command::AttestWorker { .. }
        | Command::Completions { .. }
        | Command::Toolchain { .. }
        | Command::Init { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// Prints an error as `error:`, its causes and its `hint:` on stderr. Errors quote
/// files, remotes and nvcc: nothing of theirs may drive the terminal.
pub fn print_error(e: &kart::Error) {
    let shown = |s: String| kart::untrusted::for_terminal(&s).into_owned();
    eprintln!("error: {}", shown(e.to_string()));
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        eprintln!("  caused by: {}", shown(s.to_string()));
        source = s.source();
    }
    if let Some(hint) = e.hint() {
        eprintln!("hint: {}", shown(hint));
    }
}

/// The kernels a command names, or `None` when it is about the whole project (and so
/// also about any kernel that could not be read).
fn named_kernels(command: &Command) -> Option<Vec<String>> {
    let named = |kernels: &[String]| (!kernels.is_empty()).then(|| kernels.to_vec());
    match command {
        Command::Build(args) => named(&args.kernels),
        Command::Ls { kernels, .. }
        | Command::Fetch { kernels, .. }
        | Command::Coverage { kernels, .. }
        | Command::Bundle { kernels, .. }
        | Command::Tune { kernels, .. } => named(kernels),
        Command::Explain { kernel, .. } | Command::Path { kernel, .. } => {
            Some(vec![kernel.clone()])
        }
        Command::Export { selectors, .. } => named(
            &selectors
                .iter()
                .map(|s| s.kernel.clone())
                .collect::<Vec<_>>(),
        ),
        Command::Smoke { .. }
        | Command::AttestWorker { .. }
        | Command::Completions { .. }
        | Command::Toolchain { .. }
        | Command::Init { .. } => Some(Vec::new()),
        Command::Verify { .. }
        | Command::Doctor { .. }
        | Command::Push { .. }
        | Command::Gc { .. } => None,
    }
}

/// After a command about the whole project ran over the kernels that could be read:
/// each broken kernel's error, and exit 2.
fn report_broken(broken: &[kart::project::BrokenKernel]) -> Result<ExitCode> {
    for b in broken {
        print_error(&b.error);
    }
    let names: Vec<String> = broken
        .iter()
        .map(|b| format!("`{}` ({})", b.name, b.manifest.display()))
        .collect();
    Err(Error::usage(
        format!(
            "{} kernel(s) could not be read: {}; the command ran over the others",
            broken.len(),
            names.join(", ")
        ),
        Some("fix the errors above; their kart.lock records are kept as they were".into()),
    ))
}

/// `--rebuild N` or `--rebuild all`.
fn parse_rebuild(text: &str) -> std::result::Result<usize, String> {
    match text {
        "all" => Ok(usize::MAX),
        n => n
            .parse()
            .map_err(|_| format!("`{n}` is neither a count nor `all`")),
    }
}

/// Prints `value` as pretty JSON on stdout.
fn print_json(value: &impl serde::Serialize) {
    // The reports are plain structs of strings and numbers: they always serialize.
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Opens the remote the command line, environment or kart.toml names, if any, with the
/// command line's clocks over kart.toml's.
fn open_remote(cli: &Cli, ws: &Workspace, jobs: usize) -> Result<Option<kart::remote::Remote>> {
    let Some(mut settings) =
        kart::remote::transfer::remote_settings(&ws.project, cli.remote.as_deref())
    else {
        return Ok(None);
    };
    settings.read_only |= cli.read_only;
    if let Some(anonymous) = kart::remote::anonymous_from_env(
        std::env::var(kart::remote::ANONYMOUS_ENV).ok().as_deref(),
    )? {
        settings.anonymous = anonymous;
    }
    settings.jobs = jobs.max(1);
    let t = &mut settings.timeouts;
    t.connect = cli.connect_timeout.unwrap_or(t.connect);
    t.first_byte = cli.first_byte_timeout.unwrap_or(t.first_byte);
    t.stall = cli.stall_timeout.unwrap_or(t.stall);
    let token = std::env::var(kart::remote::TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .filter(|_| {
            let token_url = std::env::var(kart::remote::TOKEN_URL_ENV).ok();
            match kart::remote::token_allowed(
                &settings.url,
                cli.remote.as_deref(),
                token_url.as_deref(),
            ) {
                Ok(()) => true,
                Err(why) => {
                    if !cli.quiet {
                        eprintln!("warning: {why}");
                    }
                    false
                }
            }
        });
    kart::remote::Remote::open(&settings, token).map(Some)
}
