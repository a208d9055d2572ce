//! Compiles on a Remote Execution API (REAPI v2) cluster: each program a compile runs
//! (nvcc for a config or a batch's front end, ptxas for each config of a batch)
//! becomes one `Action` whose `Command` is the command line kart runs here, with
//! relative paths, over an input root holding exactly what the compile may read:
//!
//! ```text
//! src/                    the working folder: the project's files at their own
//!   kernels/k/k.cu        relative paths (the kernel's sources, its include
//!   kernels/k/include/…   folders, header libraries kept in the project)
//!   .kart-action/         what kart generated for the compile (a template kernel's
//!                         unit, a config's PTX) and where the outputs go
//! toolchain/              the pinned toolkit's files that shape device code
//!   bin/nvcc …            (nvcc, its profile, cudafe++, ptxas, cicc, libdevice,
//!                         include/): those the toolchain fingerprint covers
//! lib/<name>/             each header library installed outside the project
//! ```
//!
//! so the command reads `../toolchain/bin/nvcc … -isystem ../lib/cutlass -I kernels/k
//! -o .kart-action/out.cubin kernels/k/k.cu`: the same project-relative paths as a
//! compile here, and the same bytes (nvcc's module ids do not depend on the folder:
//! see `compile::reproducible_args`). The toolchain's identity (its fingerprint) is a
//! platform property of the Command. The toolkit and each library are hashed once per
//! build ([`DigestCache`]) and uploaded once (FindMissingBlobs first).
//!
//! What comes back (the cubin, a batch's PTX, the dependency file, stderr with
//! ptxas's resource report) is written into the compile's scratch folder as a local
//! run would have, and the compile checks and stores it with the same code
//! ([`crate::pipeline::compile::compile_on`]): the action entry is the same, and a
//! digest that disagrees with the lock fails the build as a local one would.
//!
//! A compile stays here when its bytes depend on the folder it runs in (line
//! information) or its command line names a file outside the layout. When the
//! executor fails (the server is unreachable or stops answering, the wait passes its
//! deadline, a worker is lost or returns no output), the compile runs here, with one
//! warning for the build; after an unreachable server no further compile is sent. A
//! compile that fails on a worker is run here again, so that its error is the one a
//! local build reports and the build's result does not depend on where it ran.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message as _;

pub use crate::pipeline::action_paths::{
    ACTION_PATH, LIBRARY_DIR, SCRATCH_DIR, TOOLCHAIN_DIR, TOOLCHAIN_PROPERTY, WORK_DIR,
};
use crate::pipeline::action_paths::{
    local_depfile, local_text, project_inputs, remote_args, scratch_relative,
};
use crate::pipeline::compile::{CompileJob, Local, Run, Runner, Tool};
use crate::pipeline::process::ProcessOutcome;
use crate::remote::exec::{ExecFailure, Executor};
use crate::remote::merkle::{BlobSource, Blobs, Digest, DigestCache, TreeBuilder, folder_tree};

/// How far past a compile's own timeout kart waits for an executor by default: time to
/// queue, upload and download.
const DEFAULT_SLACK: Duration = Duration::from_secs(120);

/// The toolkit files an action gets, relative to the toolkit root: those that shape
/// device code (the fingerprint's components, `include/`) and what nvcc needs to run
/// them (its profile, `bin/crt`).
pub fn toolkit_file(rel: &str) -> bool {
    matches!(
        rel,
        "bin/nvcc" | "bin/nvcc.profile" | "bin/cudafe++" | "bin/ptxas" | "nvvm/bin/cicc"
    ) || rel.starts_with("bin/crt/")
        || rel.starts_with("nvvm/libdevice/")
        || rel.starts_with("include/")
}

/// Where and how to execute.
#[derive(Clone)]
pub struct ExecutorOptions {
    /// The server.
    pub executor: Arc<dyn Executor>,
    /// How long to wait for one action's result before compiling here; `None`: the
    /// compile's own timeout plus two minutes.
    pub deadline: Option<Duration>,
    /// Compiles run here at once when the executor fails (the machine's cores).
    pub local_jobs: usize,
}

impl std::fmt::Debug for ExecutorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorOptions")
            .field("url", &self.executor.url())
            .field("deadline", &self.deadline)
            .field("local_jobs", &self.local_jobs)
            .finish()
    }
}

/// A folder built into a `Directory` tree once per build, with its blobs.
#[derive(Debug)]
struct Subtree {
    digest: Digest,
    blobs: Blobs,
}

/// What the executor did in one build.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ExecStats {
    /// Programs run on the executor.
    pub remote: usize,
    /// Programs run here (not eligible, or after a failure).
    pub local: usize,
    /// Programs run here because the executor failed.
    pub fallbacks: usize,
    /// Blobs uploaded, and their bytes.
    pub uploaded_blobs: u64,
    /// Bytes uploaded.
    pub uploaded_bytes: u64,
    /// Bytes downloaded (outputs, stdout, stderr).
    pub downloaded_bytes: u64,
    /// Time to hash the toolkit's files (once per build).
    pub toolkit_hash_ms: u64,
    /// Files and bytes of the toolkit in each action's input root.
    pub toolkit_files: usize,
    /// Bytes of the toolkit in each action's input root.
    pub toolkit_bytes: u64,
    /// Milliseconds, summed over the actions run remotely: building each action and
    /// uploading what the server lacked (the toolkit's first upload included).
    pub prepare_ms: u64,
    /// Waiting in `Execute` (queue and run, as seen from here).
    pub execute_ms: u64,
    /// Queued on the server: from the result's metadata, queued to a worker's start.
    pub queued_ms: u64,
    /// Running on a worker (the result's metadata).
    pub worker_ms: u64,
    /// Downloading the outputs.
    pub download_ms: u64,
}

/// A counting semaphore for the compiles run here.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn take(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        SlotGuard(self)
    }
}

struct SlotGuard<'a>(&'a Slots);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += 1;
        self.0.freed.notify_one();
    }
}

/// Runs a build's compiles on an executor ([`Runner`]); see the module's doc.
pub struct RemoteRunner<'a> {
    options: ExecutorOptions,
    note: &'a (dyn Fn(&str) + Sync),
    cache: DigestCache,
    toolkit: OnceLock<std::result::Result<Arc<Subtree>, String>>,
    ptxas: OnceLock<std::result::Result<Arc<Subtree>, String>>,
    libraries: Mutex<HashMap<PathBuf, Arc<Subtree>>>,
    /// Blobs the server is known to have.
    present: Mutex<HashSet<Digest>>,
    /// Why no more compiles go to the server, once it proved unreachable.
    broken: Mutex<Option<String>>,
    warned: AtomicBool,
    slots: Slots,
    remote: AtomicUsize,
    local: AtomicUsize,
    fallbacks: AtomicUsize,
    uploaded_blobs: AtomicU64,
    uploaded_bytes: AtomicU64,
    downloaded_bytes: AtomicU64,
    toolkit_hash_ms: AtomicU64,
    toolkit_files: AtomicUsize,
    toolkit_bytes: AtomicU64,
    /// prepare, execute, queued, worker, download (see [`ExecStats`]).
    times: [AtomicU64; 5],
}

/// Milliseconds from `from` to `to`, timestamps of an action's metadata (0 if unset).
fn span_ms(
    from: &Option<bazel_remote_apis::google::protobuf::Timestamp>,
    to: &Option<bazel_remote_apis::google::protobuf::Timestamp>,
) -> u64 {
    let ms = |t: &bazel_remote_apis::google::protobuf::Timestamp| {
        t.seconds as i128 * 1000 + i128::from(t.nanos) / 1_000_000
    };
    match (from, to) {
        (Some(a), Some(b)) => (ms(b) - ms(a)).clamp(0, i128::from(u32::MAX)) as u64,
        _ => 0,
    }
}

/// One action, ready to upload and execute.
#[derive(Debug)]
pub struct ActionSpec {
    /// The `Action`'s digest.
    pub digest: Digest,
    /// The `Command`.
    pub command: re::Command,
    /// The input root's digest.
    pub input_root: Digest,
    /// Every blob the action needs: the Action, the Command, the input root's
    /// directories and files.
    pub blobs: Blobs,
    /// Each output's path in the action (relative to the working folder) and here.
    pub outputs: Vec<(String, PathBuf)>,
}

impl<'a> RemoteRunner<'a> {
    /// A runner for one build; `note` shows a line (the fallback's warning).
    pub fn new(options: ExecutorOptions, note: &'a (dyn Fn(&str) + Sync)) -> RemoteRunner<'a> {
        let local_jobs = options.local_jobs.max(1);
        RemoteRunner {
            options,
            note,
            cache: DigestCache::default(),
            toolkit: OnceLock::new(),
            ptxas: OnceLock::new(),
            libraries: Mutex::new(HashMap::new()),
            present: Mutex::new(HashSet::new()),
            broken: Mutex::new(None),
            warned: AtomicBool::new(false),
            slots: Slots {
                free: Mutex::new(local_jobs),
                freed: Condvar::new(),
            },
            remote: AtomicUsize::new(0),
            local: AtomicUsize::new(0),
            fallbacks: AtomicUsize::new(0),
            uploaded_blobs: AtomicU64::new(0),
            uploaded_bytes: AtomicU64::new(0),
            downloaded_bytes: AtomicU64::new(0),
            toolkit_hash_ms: AtomicU64::new(0),
            toolkit_files: AtomicUsize::new(0),
            toolkit_bytes: AtomicU64::new(0),
            times: Default::default(),
        }
    }

    fn add_time(&self, which: usize, ms: u64) {
        self.times[which].fetch_add(ms, Ordering::Relaxed);
    }

    /// What this runner did so far.
    pub fn stats(&self) -> ExecStats {
        ExecStats {
            remote: self.remote.load(Ordering::Relaxed),
            local: self.local.load(Ordering::Relaxed),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            uploaded_blobs: self.uploaded_blobs.load(Ordering::Relaxed),
            uploaded_bytes: self.uploaded_bytes.load(Ordering::Relaxed),
            downloaded_bytes: self.downloaded_bytes.load(Ordering::Relaxed),
            toolkit_hash_ms: self.toolkit_hash_ms.load(Ordering::Relaxed),
            toolkit_files: self.toolkit_files.load(Ordering::Relaxed),
            toolkit_bytes: self.toolkit_bytes.load(Ordering::Relaxed),
            prepare_ms: self.times[0].load(Ordering::Relaxed),
            execute_ms: self.times[1].load(Ordering::Relaxed),
            queued_ms: self.times[2].load(Ordering::Relaxed),
            worker_ms: self.times[3].load(Ordering::Relaxed),
            download_ms: self.times[4].load(Ordering::Relaxed),
        }
    }

    /// Runs `run` here, within the machine's share of compiles.
    fn run_here(&self, job: &CompileJob<'_>, run: &Run<'_>) -> std::io::Result<ProcessOutcome> {
        let _slot = self.slots.take();
        self.local.fetch_add(1, Ordering::Relaxed);
        Local.run(job, run)
    }

    /// The warning for the first failure of the build; later ones are counted.
    fn warn(&self, why: &str) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        if !self.warned.swap(true, Ordering::SeqCst) {
            (self.note)(&format!(
                "warning: executor {}: {why}; compiling here instead (the result is the same)",
                self.options.executor.url()
            ));
        }
    }

    /// The toolkit's tree (all of it, or ptxas alone), hashed and uploaded once.
    fn toolkit_tree(&self, job: &CompileJob<'_>, tool: Tool) -> Result<Arc<Subtree>, ExecFailure> {
        let root = job.toolchain.root.clone();
        let build = |keep: &dyn Fn(&str) -> bool| {
            let start = Instant::now();
            let mut blobs = Blobs::default();
            let digest = folder_tree(&root, keep, &self.cache, &mut blobs)
                .map_err(|e| format!("cannot read the toolkit: {}", e.with_causes()))?;
            let tree = Arc::new(Subtree { digest, blobs });
            if tool == Tool::Nvcc {
                self.toolkit_hash_ms
                    .store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
                let files = tree
                    .blobs
                    .0
                    .values()
                    .filter(|s| matches!(s, BlobSource::File(_)));
                self.toolkit_files.store(files.count(), Ordering::Relaxed);
                self.toolkit_bytes
                    .store(tree.blobs.bytes(), Ordering::Relaxed);
            }
            self.upload(&tree.blobs).map_err(|e| e.to_string())?;
            Ok(tree)
        };
        let cell = match tool {
            Tool::Nvcc => &self.toolkit,
            Tool::Ptxas => &self.ptxas,
        };
        let tree = cell.get_or_init(|| match tool {
            Tool::Nvcc => build(&toolkit_file),
            Tool::Ptxas => build(&|rel| rel == "bin/ptxas"),
        });
        tree.clone().map_err(ExecFailure::Failed)
    }

    /// A header library's tree (installed outside the project), hashed and uploaded
    /// once.
    fn library_tree(&self, include: &Path) -> Result<Arc<Subtree>, ExecFailure> {
        let mut libraries = self.libraries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tree) = libraries.get(include) {
            return Ok(tree.clone());
        }
        let mut blobs = Blobs::default();
        let digest = folder_tree(include, &|_| true, &self.cache, &mut blobs).map_err(|e| {
            ExecFailure::Failed(format!(
                "cannot read the header library at {}: {}",
                include.display(),
                e.with_causes()
            ))
        })?;
        let tree = Arc::new(Subtree { digest, blobs });
        self.upload(&tree.blobs)?;
        libraries.insert(include.to_path_buf(), tree.clone());
        Ok(tree)
    }

    /// Uploads what the server lacks of `blobs`.
    fn upload(&self, blobs: &Blobs) -> Result<(), ExecFailure> {
        let unknown: Vec<Digest> = {
            let present = self.present.lock().unwrap_or_else(|p| p.into_inner());
            blobs
                .0
                .keys()
                .filter(|d| !present.contains(*d))
                .cloned()
                .collect()
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let executor = &self.options.executor;
        let mut missing = Vec::new();
        for chunk in unknown.chunks(4096) {
            missing.extend(executor.find_missing(chunk)?);
        }
        // Upload in pieces of about 16 MiB, so memory stays bounded.
        let mut piece: Vec<(Digest, Vec<u8>)> = Vec::new();
        let mut piece_bytes = 0u64;
        for d in &missing {
            let Some(source) = blobs.0.get(d) else {
                continue;
            };
            let bytes = source
                .read()
                .map_err(|e| ExecFailure::Failed(e.with_causes()))?;
            if Digest::of(&bytes) != *d {
                return Err(ExecFailure::Failed(format!(
                    "an input changed while the build ran (its digest is no longer {d})"
                )));
            }
            piece_bytes += d.size;
            piece.push((d.clone(), bytes));
            if piece_bytes >= 16 << 20 {
                executor.upload(std::mem::take(&mut piece))?;
                piece_bytes = 0;
            }
        }
        if !piece.is_empty() {
            executor.upload(piece)?;
        }
        self.uploaded_blobs
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        self.uploaded_bytes.fetch_add(
            missing.iter().map(|d| d.size).sum::<u64>(),
            Ordering::Relaxed,
        );
        let mut present = self.present.lock().unwrap_or_else(|p| p.into_inner());
        present.extend(unknown);
        Ok(())
    }

    /// The action for `run`, or `None` when it must run here (see the module's doc).
    pub fn action(
        &self,
        job: &CompileJob<'_>,
        run: &Run<'_>,
    ) -> Result<Option<ActionSpec>, ExecFailure> {
        let Some(args) = remote_args(job, run) else {
            return Ok(None);
        };
        let failed = |why: String| ExecFailure::Failed(why);
        let mut tree = TreeBuilder::default();
        let mut blobs = Blobs::default();
        let toolkit = self.toolkit_tree(job, run.tool)?;
        tree.add_tree(TOOLCHAIN_DIR, toolkit.digest.clone())
            .map_err(failed)?;
        blobs.extend(&toolkit.blobs);
        if run.tool == Tool::Nvcc {
            for (rel, path) in project_inputs(job).map_err(failed)? {
                let (digest, executable) = self
                    .cache
                    .file(&path)
                    .map_err(|e| failed(e.with_causes()))?;
                blobs
                    .0
                    .entry(digest.clone())
                    .or_insert(BlobSource::File(path));
                tree.add_file(&format!("{WORK_DIR}/{rel}"), digest, executable)
                    .map_err(failed)?;
            }
            for name in &job.kernel.libraries {
                let Some(pin) = job.toolchain.libraries.get(name) else {
                    continue;
                };
                if pin.include.is_absolute() {
                    let lib = self.library_tree(&pin.include)?;
                    tree.add_tree(&format!("{LIBRARY_DIR}/{name}"), lib.digest.clone())
                        .map_err(failed)?;
                    blobs.extend(&lib.blobs);
                }
            }
        }
        for input in run.inputs {
            let rel = scratch_relative(run.scratch, input).ok_or_else(|| {
                failed(format!(
                    "`{}` is outside the compile's folder",
                    input.display()
                ))
            })?;
            let bytes = std::fs::read(input)
                .map_err(|e| failed(format!("cannot read `{}`: {e}", input.display())))?;
            let digest = blobs.add_bytes(bytes);
            tree.add_file(&format!("{WORK_DIR}/{SCRATCH_DIR}/{rel}"), digest, false)
                .map_err(failed)?;
        }
        let mut outputs = Vec::new();
        for output in run.outputs {
            let rel = scratch_relative(run.scratch, output).ok_or_else(|| {
                failed(format!(
                    "`{}` is outside the compile's folder",
                    output.display()
                ))
            })?;
            outputs.push((format!("{SCRATCH_DIR}/{rel}"), output.clone()));
        }
        outputs.sort();
        let input_root = tree.build(&mut blobs);
        let program = match run.tool {
            Tool::Nvcc => format!("../{TOOLCHAIN_DIR}/bin/nvcc"),
            Tool::Ptxas => format!("../{TOOLCHAIN_DIR}/bin/ptxas"),
        };
        let platform = re::Platform {
            properties: vec![re::platform::Property {
                name: TOOLCHAIN_PROPERTY.into(),
                value: job.toolchain.fingerprint.clone(),
            }],
        };
        // The platform goes into the Command (where servers before REAPI 2.2 read it)
        // and the Action (where later ones do).
        #[allow(deprecated)]
        let command = re::Command {
            arguments: std::iter::once(program).chain(args).collect(),
            environment_variables: vec![re::command::EnvironmentVariable {
                name: "PATH".into(),
                value: ACTION_PATH.into(),
            }],
            output_paths: outputs.iter().map(|(p, _)| p.clone()).collect(),
            working_directory: WORK_DIR.into(),
            platform: Some(platform.clone()),
            ..Default::default()
        };
        let command_digest = blobs.add_bytes(command.encode_to_vec());
        let action = re::Action {
            command_digest: Some(command_digest.to_proto()),
            input_root_digest: Some(input_root.to_proto()),
            timeout: Some(bazel_remote_apis::google::protobuf::Duration {
                seconds: run.timeout.as_secs().min(i64::MAX as u64) as i64,
                nanos: 0,
            }),
            do_not_cache: false,
            platform: Some(platform),
            ..Default::default()
        };
        let digest = blobs.add_bytes(action.encode_to_vec());
        Ok(Some(ActionSpec {
            digest,
            command,
            input_root,
            blobs,
            outputs,
        }))
    }

    /// Uploads and executes `spec`; writes its outputs where `run` expects them.
    fn execute(
        &self,
        job: &CompileJob<'_>,
        run: &Run<'_>,
        spec: &ActionSpec,
    ) -> Result<ProcessOutcome, ExecFailure> {
        let start = Instant::now();
        self.upload(&spec.blobs)?;
        self.add_time(0, start.elapsed().as_millis() as u64);
        let deadline = self.options.deadline.unwrap_or(run.timeout + DEFAULT_SLACK);
        let executing = Instant::now();
        let result = self.options.executor.execute(&spec.digest, deadline)?;
        self.add_time(1, executing.elapsed().as_millis() as u64);
        if let Some(m) = &result.execution_metadata {
            self.add_time(2, span_ms(&m.queued_timestamp, &m.worker_start_timestamp));
            self.add_time(
                3,
                span_ms(&m.worker_start_timestamp, &m.worker_completed_timestamp),
            );
        }
        let downloading = Instant::now();
        let executor = &self.options.executor;
        let text = |raw: &[u8], digest: &Option<re::Digest>| -> Result<String, ExecFailure> {
            let bytes = match digest {
                Some(d) if raw.is_empty() && d.size_bytes > 0 => {
                    let d = Digest::from_proto(d).map_err(ExecFailure::Failed)?;
                    let bytes = executor.download(&d)?;
                    self.downloaded_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    bytes
                }
                _ => raw.to_vec(),
            };
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let stdout = text(&result.stdout_raw, &result.stdout_digest)?;
        let stderr = text(&result.stderr_raw, &result.stderr_digest)?;
        let code = result.exit_code;
        if code == 0 {
            for (remote, local) in &spec.outputs {
                let file = result
                    .output_files
                    .iter()
                    .find(|f| f.path == *remote)
                    .ok_or_else(|| {
                        ExecFailure::Failed(format!(
                            "the action succeeded without its output `{remote}`"
                        ))
                    })?;
                let digest = file
                    .digest
                    .as_ref()
                    .ok_or_else(|| ExecFailure::Failed(format!("`{remote}` has no digest")))
                    .and_then(|d| Digest::from_proto(d).map_err(ExecFailure::Failed))?;
                let bytes = if !file.contents.is_empty() || digest.size == 0 {
                    file.contents.clone()
                } else {
                    executor.download(&digest)?
                };
                if Digest::of(&bytes) != digest {
                    return Err(ExecFailure::Failed(format!(
                        "`{remote}` does not match its digest {digest}"
                    )));
                }
                self.downloaded_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let bytes = if local.extension().is_some_and(|e| e == "d") {
                    local_depfile(job, run.scratch, &String::from_utf8_lossy(&bytes)).into_bytes()
                } else {
                    bytes
                };
                std::fs::write(local, bytes).map_err(|e| {
                    ExecFailure::Failed(format!("cannot write `{}`: {e}", local.display()))
                })?;
            }
        }
        self.add_time(4, downloading.elapsed().as_millis() as u64);
        let status = if (0..=255).contains(&code) {
            std::process::ExitStatus::from_raw(code << 8)
        } else {
            std::process::ExitStatus::from_raw(libc::SIGKILL)
        };
        Ok(ProcessOutcome {
            status: Some(status),
            timed_out: false,
            stdout: local_text(job, run.scratch, &stdout),
            stderr: local_text(job, run.scratch, &stderr),
            elapsed: start.elapsed(),
        })
    }
}

impl Runner for RemoteRunner<'_> {
    fn run(&self, job: &CompileJob<'_>, run: &Run<'_>) -> std::io::Result<ProcessOutcome> {
        let broken = self
            .broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if broken.is_some() {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            return self.run_here(job, run);
        }
        let preparing = Instant::now();
        let outcome = self.action(job, run).and_then(|spec| {
            self.add_time(0, preparing.elapsed().as_millis() as u64);
            spec.map(|spec| self.execute(job, run, &spec)).transpose()
        });
        match outcome {
            Ok(None) => self.run_here(job, run),
            Ok(Some(remote)) if remote.status.is_some_and(|s| s.success()) => {
                self.remote.fetch_add(1, Ordering::Relaxed);
                Ok(remote)
            }
            // Failed on the worker: run here, so that the error reported is the one a
            // local build reports (and a worker's own fault does not fail the build).
            Ok(Some(_)) => {
                let here = self.run_here(job, run)?;
                if here.status.is_some_and(|s| s.success()) {
                    self.warn("a compile failed on a worker and succeeded here");
                }
                Ok(here)
            }
            Err(failure) => {
                if let ExecFailure::Unreachable(why) = &failure {
                    let mut broken = self.broken.lock().unwrap_or_else(|p| p.into_inner());
                    broken.get_or_insert_with(|| why.clone());
                }
                self.warn(&failure.to_string());
                self.run_here(job, run)
            }
        }
    }
}
