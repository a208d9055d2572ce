//! Compiling on a Remote Execution API executor: the actions kart builds from compiles
//! (relative command lines over a Merkle input root), run by an in-process executor
//! that lays each input root out in a fresh folder and runs its command, as a worker
//! would; the bytes and the lock are those of a local build.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use kart::pipeline::compile::{CompileJob, Run, Tool};
use kart::pipeline::remote_exec::{ExecutorOptions, RemoteRunner};
use kart::remote::exec::{ExecFailure, Executor};
use kart::remote::merkle::Digest;
use prost::Message as _;

use crate::harness::{TestProject, lock_digests, real_nvcc, repo_root};
use crate::trust::cute_project;

/// An executor in this process: a content-addressed map, an action cache, and each
/// action run in a temp folder laid out from its input root (files only, executable
/// bits kept).
#[derive(Default)]
struct InProcess {
    cas: Mutex<HashMap<Digest, Vec<u8>>>,
    results: Mutex<HashMap<Digest, re::ActionResult>>,
    executed: AtomicUsize,
    uploaded: AtomicUsize,
}

impl InProcess {
    fn blob(&self, d: &re::Digest) -> Vec<u8> {
        let d = Digest::from_proto(d).unwrap();
        self.cas.lock().unwrap()[&d].clone()
    }

    fn lay_out(&self, d: &re::Digest, dir: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        let tree = re::Directory::decode(self.blob(d).as_slice()).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        for f in &tree.files {
            let path = dir.join(&f.name);
            std::fs::write(&path, self.blob(f.digest.as_ref().unwrap())).unwrap();
            let mode = if f.is_executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        for sub in &tree.directories {
            self.lay_out(sub.digest.as_ref().unwrap(), &dir.join(&sub.name));
        }
    }
}

impl Executor for InProcess {
    fn url(&self) -> String {
        "in-process".into()
    }

    fn find_missing(&self, digests: &[Digest]) -> Result<Vec<Digest>, ExecFailure> {
        let cas = self.cas.lock().unwrap();
        Ok(digests
            .iter()
            .filter(|d| !cas.contains_key(*d))
            .cloned()
            .collect())
    }

    fn upload(&self, blobs: Vec<(Digest, Vec<u8>)>) -> Result<(), ExecFailure> {
        let mut cas = self.cas.lock().unwrap();
        for (d, bytes) in blobs {
            assert_eq!(Digest::of(&bytes), d);
            self.uploaded.fetch_add(1, Ordering::Relaxed);
            cas.insert(d, bytes);
        }
        Ok(())
    }

    fn execute(&self, digest: &Digest, _: Duration) -> Result<re::ActionResult, ExecFailure> {
        if let Some(cached) = self.results.lock().unwrap().get(digest) {
            return Ok(cached.clone());
        }
        self.executed.fetch_add(1, Ordering::Relaxed);
        let action = re::Action::decode(self.blob(&digest.to_proto()).as_slice()).unwrap();
        let command = re::Command::decode(
            self.blob(action.command_digest.as_ref().unwrap())
                .as_slice(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        self.lay_out(action.input_root_digest.as_ref().unwrap(), dir.path());
        let cwd = dir.path().join(&command.working_directory);
        for out in &command.output_paths {
            std::fs::create_dir_all(cwd.join(out).parent().unwrap()).unwrap();
        }
        let output = std::process::Command::new(cwd.join(&command.arguments[0]))
            .args(&command.arguments[1..])
            .env_clear()
            .envs(
                command
                    .environment_variables
                    .iter()
                    .map(|v| (&v.name, &v.value)),
            )
            .current_dir(&cwd)
            .output()
            .unwrap();
        let mut result = re::ActionResult {
            exit_code: output.status.code().unwrap_or(-1),
            stdout_raw: output.stdout,
            stderr_raw: output.stderr,
            ..Default::default()
        };
        for out in &command.output_paths {
            if let Ok(bytes) = std::fs::read(cwd.join(out)) {
                let d = Digest::of(&bytes);
                self.cas.lock().unwrap().insert(d.clone(), bytes);
                result.output_files.push(re::OutputFile {
                    path: out.clone(),
                    digest: Some(d.to_proto()),
                    ..Default::default()
                });
            }
        }
        if result.exit_code == 0 {
            let mut results = self.results.lock().unwrap();
            results.insert(digest.clone(), result.clone());
        }
        Ok(result)
    }

    fn download(&self, digest: &Digest) -> Result<Vec<u8>, ExecFailure> {
        Ok(self.cas.lock().unwrap()[digest].clone())
    }
}

/// Shows every note and failure on stderr (the test's output when it fails).
struct Shown;

impl kart::pipeline::BuildReporter for Shown {
    fn compiled(
        &self,
        artifact: &str,
        result: Result<Duration, &kart::pipeline::compile::CompileFailure>,
    ) {
        if let Err(failure) = result {
            eprintln!("{artifact}: {failure}");
        }
    }

    fn note(&self, message: &str) {
        eprintln!("{message}");
    }
}

const CONFIG: [(&str, i64); 4] = [("BM", 64), ("BN", 64), ("BK", 64), ("STAGES", 3)];

/// The committed lock's digest of the CuTe config [`CONFIG`].
fn committed_digest() -> String {
    let lock = std::fs::read_to_string(repo_root().join("kart.lock")).unwrap();
    let lock = kart::store::lockfile::Lockfile::parse(&lock, Path::new("kart.lock")).unwrap();
    lock.artifacts
        .iter()
        .find(|a| {
            a.kernel == "cute_gemm"
                && CONFIG
                    .iter()
                    .all(|(k, v)| a.config.get(k) == Some(&kart::model::ParamValue::Int(*v)))
        })
        .map(|a| a.digest.clone())
        .expect("the committed lock has the CuTe config")
}

fn workspace(p: &TestProject) -> kart::workspace::Workspace {
    let project = kart::project::Project::load(p.root()).unwrap();
    kart::workspace::Workspace::open(
        project,
        kart::store::LockMode::Shared,
        Duration::from_secs(60),
    )
    .unwrap()
}

fn options(executor: Arc<dyn Executor>) -> kart::pipeline::BuildOptions {
    let mut selection = kart::pipeline::Selection::default();
    selection.kernels.push("cute_gemm".into());
    for (k, v) in CONFIG {
        selection
            .params
            .insert(k.into(), kart::model::ParamValue::Int(v));
    }
    kart::pipeline::BuildOptions {
        selection,
        nvcc: Some(real_nvcc()),
        jobs: 2,
        executor: Some(ExecutorOptions {
            executor,
            deadline: None,
            local_jobs: 1,
        }),
        ..Default::default()
    }
}

#[test]
fn a_cute_config_compiled_by_an_executor_has_the_committed_digest() {
    let p = cute_project();
    let ws = workspace(&p);
    let executor = Arc::new(InProcess::default());
    kart::pipeline::build(&ws, &options(executor.clone()), &Shown).unwrap();
    assert_eq!(executor.executed.load(Ordering::Relaxed), 1);
    assert_eq!(lock_digests(&p), [committed_digest()]);
    // A second project in another folder, its own store: the same action (a hit of the
    // executor's action cache), nothing uploaded again.
    let q = cute_project();
    let before = executor.uploaded.load(Ordering::Relaxed);
    kart::pipeline::build(&workspace(&q), &options(executor.clone()), &Shown).unwrap();
    assert_eq!(executor.uploaded.load(Ordering::Relaxed), before);
    assert_eq!(executor.executed.load(Ordering::Relaxed), 1);
    assert_eq!(lock_digests(&q), [committed_digest()]);
}

/// The action of the CuTe config's compile in project `p`.
fn cute_action(p: &TestProject) -> (Digest, Digest, re::Command) {
    let ws = workspace(p);
    let toolchain = ws.toolchain(Some(&real_nvcc())).unwrap();
    let kernel = ws
        .project
        .kernels
        .iter()
        .find(|k| k.name == "cute_gemm")
        .unwrap();
    let config = CONFIG
        .iter()
        .map(|(k, v)| (k.to_string(), kart::model::ParamValue::Int(*v)))
        .collect::<kart::model::Config>();
    let job = CompileJob {
        root: &ws.project.root,
        toolchain: &toolchain,
        kernel,
        config: &config,
        target: "sm_90a".parse().unwrap(),
        kind: kart::model::ArtifactKind::Cubin,
        timeout: Duration::from_secs(600),
    };
    let scratch = tempfile::tempdir().unwrap();
    let unit = scratch.path().join("kart_instances.cu");
    std::fs::write(&unit, "// unit\n").unwrap();
    let out = scratch.path().join("out.cubin");
    let deps = scratch.path().join("out.d");
    let args = kart::pipeline::compile::nvcc_args(&job, &unit, &out, &deps).unwrap();
    let run = Run {
        tool: Tool::Nvcc,
        args: &args,
        scratch: scratch.path(),
        inputs: std::slice::from_ref(&unit),
        outputs: &[out.clone(), deps.clone()],
        timeout: Duration::from_secs(600),
    };
    let executor: Arc<dyn Executor> = Arc::new(InProcess::default());
    let note = |_: &str| {};
    let runner = RemoteRunner::new(
        ExecutorOptions {
            executor,
            deadline: None,
            local_jobs: 1,
        },
        &note,
    );
    let spec = runner.action(&job, &run).unwrap().unwrap();
    (spec.digest, spec.input_root, spec.command)
}

#[test]
fn the_same_compile_is_the_same_action_in_two_folders_and_a_source_change_changes_it() {
    let (a, b) = (cute_project(), cute_project());
    let (action_a, root_a, command) = cute_action(&a);
    let (action_b, root_b, _) = cute_action(&b);
    assert_eq!(root_a, root_b);
    assert_eq!(action_a, action_b);
    // Relative paths only; the toolchain's identity among the platform properties.
    for arg in &command.arguments {
        assert!(!arg.starts_with('/'), "{arg} in {:?}", command.arguments);
    }
    assert_eq!(command.arguments[0], "../toolchain/bin/nvcc");
    assert!(command.arguments.contains(&"../lib/cutlass".to_string()));
    #[allow(deprecated)]
    let platform = command.platform.unwrap();
    assert_eq!(platform.properties[0].name, "kart-toolchain");
    let source = "kernels/cute_gemm/cute_gemm.cu";
    b.write(source, &format!("{}\n// changed\n", b.read(source)));
    let (action_c, root_c, _) = cute_action(&b);
    assert_ne!(root_a, root_c);
    assert_ne!(action_a, action_c);
}
// ---- Through a real BuildGrid on loopback, from the command line -------------------

use kart_testkit::bgd_exec::{BuildGridExec, WorkerMode};

use crate::harness::{skip, stderr, text};

/// A BuildGrid with `workers`, or `None` (and the test counted as skipped) where
/// BuildGrid or PostgreSQL is not installed.
fn grid(test: &str, workers: &[WorkerMode]) -> Option<BuildGridExec> {
    if !kart_testkit::bgd_exec::available() {
        skip(
            test,
            "BuildGrid or PostgreSQL is not installed (scripts/test installs them)",
        );
        return None;
    }
    Some(BuildGridExec::start(workers).unwrap_or_else(|e| panic!("{e}")))
}

/// A small project: one plain kernel, two configs (fast to compile).
fn small_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "grid",
        "out[threadIdx.x] = A * 1000 + B;",
        "[params]\nA = [1, 2]\nB = [16]\n",
    );
    p
}

/// `kart build ARGS --executor URL` in `p`, with a deadline for each result.
fn build_on(
    p: &TestProject,
    grid: &BuildGridExec,
    args: &[&str],
    deadline: &str,
) -> std::process::Output {
    let url = grid.url();
    let mut all = vec!["build"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--executor", &url, "--executor-timeout", deadline]);
    p.kart(&all)
}

#[test]
fn a_cute_config_built_through_buildgrid_has_the_committed_digest() {
    let Some(grid) = grid(
        "a_cute_config_built_through_buildgrid_has_the_committed_digest",
        &[WorkerMode::Normal],
    ) else {
        return;
    };
    let p = cute_project();
    let mut args = vec!["cute_gemm"];
    let params: Vec<String> = CONFIG.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for param in &params {
        args.extend_from_slice(&["-p", param]);
    }
    let out = build_on(&p, &grid, &args, "900");
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out),
        grid.worker_logs()
    );
    assert_eq!(lock_digests(&p), [committed_digest()], "{}", text(&out));
    assert_eq!(p.compiles(), 0, "compiled here:\n{}", text(&out));
    assert!(
        stderr(&out).contains("1 compile step(s) ran remotely"),
        "{}",
        text(&out)
    );
    assert!(!stderr(&out).contains("warning"), "{}", text(&out));
}

#[test]
fn a_worker_lost_mid_action_ends_in_a_local_compile_with_one_warning() {
    let Some(grid) = grid(
        "a_worker_lost_mid_action_ends_in_a_local_compile_with_one_warning",
        &[WorkerMode::Die],
    ) else {
        return;
    };
    let p = small_project();
    let start = std::time::Instant::now();
    let out = build_on(&p, &grid, &[], "20");
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out),
        grid.worker_logs()
    );
    // Far less than the default deadline (the compile's 600 s timeout plus two
    // minutes): the 20 s one held, on a machine that may be compiling CuTe meanwhile.
    assert!(
        start.elapsed() < Duration::from_secs(300),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        grid.worker_logs().contains("exiting mid-action"),
        "{}",
        grid.worker_logs()
    );
    let err = stderr(&out);
    assert_eq!(err.matches("warning").count(), 1, "{err}");
    assert_eq!(p.compiles(), 2, "{err}");
    // The lock is the one a local build writes.
    let local = small_project();
    local.ok(&["build"]);
    assert_eq!(lock_digests(&p), lock_digests(&local));
    assert_eq!(p.read("kart.lock"), local.read("kart.lock"));
}

#[test]
fn a_server_that_stops_answering_ends_in_a_local_compile_with_one_warning() {
    let Some(grid) = grid(
        "a_server_that_stops_answering_ends_in_a_local_compile_with_one_warning",
        &[WorkerMode::Normal],
    ) else {
        return;
    };
    grid.freeze_server();
    let p = small_project();
    let start = std::time::Instant::now();
    let out = build_on(&p, &grid, &[], "20");
    assert!(out.status.success(), "{}", text(&out));
    // Far less than the default deadline (the compile's 600 s timeout plus two
    // minutes): the 20 s one held, on a machine that may be compiling CuTe meanwhile.
    assert!(
        start.elapsed() < Duration::from_secs(300),
        "took {:?}",
        start.elapsed()
    );
    let err = stderr(&out);
    assert_eq!(err.matches("warning").count(), 1, "{err}");
    assert_eq!(p.compiles(), 2, "{err}");
    let local = small_project();
    local.ok(&["build"]);
    assert_eq!(p.read("kart.lock"), local.read("kart.lock"));
}

#[test]
fn a_worker_returning_other_bytes_fails_the_build_naming_the_key_and_both_digests() {
    let Some(grid) = grid(
        "a_worker_returning_other_bytes_fails_the_build_naming_the_key_and_both_digests",
        &[WorkerMode::Corrupt],
    ) else {
        return;
    };
    let p = small_project();
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    let digests = lock_digests(&p);
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = build_on(&p, &grid, &[], "300");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        text(&out),
        grid.worker_logs()
    );
    let err = stderr(&out);
    assert!(err.contains("disagree with their action entries"), "{err}");
    let keys: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("key = \""))
        .map(|k| k.trim_end_matches('"'))
        .collect();
    for (key, digest) in keys.iter().zip(&digests) {
        // The message names each by its first 12 digits, as for a local mismatch.
        assert!(
            err.contains(&key[..12]) && err.contains(&digest[..12]),
            "{key} {digest}: {err}"
        );
    }
    assert_eq!(p.read("kart.lock"), lock, "the lock changed");
}
