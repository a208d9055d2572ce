//! The command line's arguments: every command, its flags and their help (the doc
//! comments are `--help`), and the parsers of their values.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCandidates;

use kart::model::ParamValue;
use kart::model::parse_param;
use kart::pipeline::Shard;
use kart::target::TargetArch;

use super::complete;

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
    #[command(flatten)]
    pub remote: RemoteArgs,
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
        #[command(flatten)]
        kernels: KernelFilter,
        #[command(flatten)]
        config: ConfigFilter,
        /// One column per param and derived param, one table per kernel.
        #[arg(long, conflicts_with = "json")]
        wide: bool,
        /// One JSON array on stdout (every param and derived param of each row).
        #[arg(long)]
        json: bool,
    },
    /// Show every input of an artifact's action key and what changed against the lock.
    Explain {
        #[command(flatten)]
        config: OneConfig,
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
        #[command(flatten)]
        json: JsonReport,
    },
    /// Write the verified, decompressed cubin of an artifact and print its path (for
    /// CuPy `RawModule(path=...)`, cuda-python and other runtimes).
    Path {
        #[command(flatten)]
        config: OneConfig,
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
        #[command(flatten)]
        kernels: KernelFilter,
        #[command(flatten)]
        targets: TargetFilter,
        /// Only what GPU 0 of this machine would load.
        #[arg(long)]
        device: bool,
        #[command(flatten)]
        jobs: TransferJobs,
        #[command(flatten)]
        json: JsonReport,
    },
    /// Upload the blobs and action entries of kart.lock that the remote lacks.
    Push {
        #[command(flatten)]
        jobs: TransferJobs,
        #[command(flatten)]
        json: JsonReport,
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
        #[command(flatten)]
        targets: TargetFilter,
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
        #[command(flatten)]
        kernels: KernelFilter,
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
        #[command(flatten)]
        json: JsonReport,
    },
    /// Write one file holding exactly what the fleet's GPUs load (the cubins, their
    /// lock records, the tuning and attestation records naming them), each blob
    /// checked; a program loads from it with KART_BUNDLE=FILE.
    ///
    /// With --trace, only the configs the traced workload launched or best() chose
    /// (on every GPU of the fleet), and each kernel's default.
    Bundle {
        #[command(flatten)]
        kernels: KernelFilter,
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
        #[command(flatten)]
        json: JsonReport,
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
        #[command(flatten)]
        json: JsonReport,
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
        #[command(flatten)]
        json: JsonReport,
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
    #[command(flatten)]
    pub config: ConfigFilter,
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
    /// The problems a workload runs (`[[problem]]` tables): the values of the
    /// kernels' `[problem_params]`.
    #[arg(long, value_name = "FILE")]
    pub problems: Option<PathBuf>,
    /// The problems a workload met, from its trace (KART_TRACE): the values of the
    /// kernels' `[problem_params]`, with those of --problems.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
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
    #[command(flatten)]
    pub remote_exec: ExecutorArgs,
}

/// The remote cache's options, global to every command (those that do not talk to a
/// remote ignore them).
#[derive(Args)]
pub struct RemoteArgs {
    /// The remote cache (default: kart.toml's [remote] url). http://, https://, file://
    /// or s3://bucket/prefix (also gs://, az://); the bearer token comes from
    /// KART_REMOTE_TOKEN, an object store's credentials from AWS_* (KART_REMOTE_ANONYMOUS=1:
    /// unsigned, read-only).
    #[arg(id = "remote", long = "remote", global = true, help_heading = REMOTE, value_name = "URL", env = "KART_REMOTE")]
    pub url: Option<String>,
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
}

/// Where a build compiles: here, or on a Remote Execution API server.
#[derive(Args)]
pub struct ExecutorArgs {
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

/// Positional kernel names that narrow a command to those kernels.
#[derive(Args)]
pub struct KernelFilter {
    /// Only these kernels (default: every kernel of kart.lock).
    #[arg(add = ArgValueCandidates::new(complete::kernels))]
    pub kernels: Vec<String>,
}

/// `-p NAME=VALUE` as a filter: configs with these values, any value of the others.
#[derive(Args)]
pub struct ConfigFilter {
    /// Only configs with these param values: -p BLOCK_M=64.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
    pub params: Vec<(String, ParamValue)>,
}

/// One config of one kernel: the kernel, and `-p NAME=VALUE` for every param of it.
#[derive(Args)]
pub struct OneConfig {
    /// The kernel.
    #[arg(add = ArgValueCandidates::new(complete::kernels))]
    pub kernel: String,
    /// Param values (all params of the kernel): -p BLOCK_M=64 -p NUM_WARPS=4.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE", value_parser = parse_param, add = ArgValueCandidates::new(complete::params))]
    pub params: Vec<(String, ParamValue)>,
}

/// `--target sm_XX`, repeated: only artifacts for these targets.
#[derive(Args)]
pub struct TargetFilter {
    /// Only artifacts for these targets.
    #[arg(long = "target", value_name = "sm_XX")]
    pub targets: Vec<TargetArch>,
}

/// `--json` for a command whose report is one JSON document.
#[derive(Args)]
pub struct JsonReport {
    /// The report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `-j/--jobs` of a transfer to or from the remote.
#[derive(Args)]
pub struct TransferJobs {
    /// Parallel transfers.
    #[arg(short, long, default_value_t = 16)]
    pub jobs: usize,
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

/// `--rebuild N` or `--rebuild all`.
fn parse_rebuild(text: &str) -> std::result::Result<usize, String> {
    match text {
        "all" => Ok(usize::MAX),
        n => n
            .parse()
            .map_err(|_| format!("`{n}` is neither a count nor `all`")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// clap's own checks of the definitions (ids, groups, conflicts naming real
    /// arguments, globals), which release builds skip at run time.
    #[test]
    fn the_command_line_definitions_are_consistent() {
        super::Cli::command().debug_assert();
    }
}
