//! Reliability campaigns: each drives the real `kart` binary (and the real nvcc) through
//! faults and prints its figures; exit 1 if any case broke a guarantee.
//!
//!   kart-campaign crash [--kills N]       kill -9 of build, fetch and gc at random
//!                                         moments, plus every failpoint once; after
//!                                         each: verify clean, lock parses and names only
//!                                         blobs present or fetchable, no temp file
//!                                         survives the next open, a rerun completes
//!                                         and gives the reference lock
//!   kart-campaign corruption [--cases N]  bit flips, truncations and swaps of blobs in
//!                                         the store and in the remote's folder; each
//!                                         must be caught (verify, path, fetch) by
//!                                         digest and quarantined, never re-served
//!   kart-campaign concurrency [--runs N]  4 overlapping builds, a gc and a fetch at
//!                                         once on one store, then a serial build: no
//!                                         error, the reference lock
//!
//! Common options: --seed S, --kart PATH (default: beside this program), --nvcc PATH
//! (default: .toolchain's), --short (CI sizes: 30 kills, 60 cases, 2 runs),
//! --file-remote (a `file://` folder instead of nginx on loopback, which is the default
//! where nginx is installed).
//!
//! Over 600 lines on purpose: three campaigns sharing one harness (a scratch project,
//! the remote, the kart binary under failpoints), kept in one development binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

use kart_testkit::nginx;

/// The campaigns' remote cache: nginx on loopback where it is installed, else a
/// `file://` folder (said in the output). `dir` holds its `cas/` and `ac/` folders.
struct RemoteHost {
    url: String,
    dir: PathBuf,
    _server: Option<nginx::Nginx>,
}

fn remote_host(root: &Path, force_file: bool) -> Res<RemoteHost> {
    if !force_file && nginx::available() {
        let server = nginx::Nginx::try_start(false)?;
        for folder in ["kart/cas", "kart/ac"] {
            std::fs::create_dir_all(server.www().join(folder))?;
        }
        return Ok(RemoteHost {
            url: format!("http://127.0.0.1:{}/kart", server.port),
            dir: server.www().join("kart"),
            _server: Some(server),
        });
    }
    let dir = root.join("remote");
    std::fs::create_dir_all(&dir)?;
    Ok(RemoteHost {
        url: format!("file://{}", dir.display()),
        dir,
        _server: None,
    })
}

const GRID: &str = "[params]\nA = [1, 2, 3, 4, 5]\nB = [16, 32]\n";

struct Env {
    kart: PathBuf,
    nvcc: PathBuf,
    rng: u64,
    file_remote: bool,
}

impl Env {
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
    fn below(&mut self, n: u64) -> u64 {
        self.random() % n.max(1)
    }

    /// A project of 20 cubins (10 configs x 2 targets) with a trusted remote.
    fn project(&self, dir: &Path, remote: &RemoteHost) -> Res<()> {
        std::fs::create_dir_all(dir.join("kernels/grid"))?;
        std::fs::write(
            dir.join("kart.toml"),
            format!(
                "[project]\ntargets = [\"sm_80\", \"sm_90\"]\n\n[toolchain]\nnvcc = \"13.0\"\n\n[remote]\nurl = \"{}\"\ntrusted = true\n",
                remote.url
            ),
        )?;
        std::fs::write(
            dir.join("kernels/grid/grid.cu"),
            "extern \"C\" __global__ void grid(float* out) { out[threadIdx.x] = A * 1000 + B; }\n",
        )?;
        std::fs::write(
            dir.join("kernels/grid/kernel.toml"),
            format!("name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n{GRID}"),
        )?;
        Ok(())
    }

    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kart);
        cmd.arg("-C")
            .arg(dir)
            .args(args)
            .env("KART_NVCC", &self.nvcc)
            .env_remove("KART_FAILPOINT")
            .env_remove("KART_PHASE_LOG")
            .env_remove("KART_REMOTE")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, dir: &Path, args: &[&str]) -> Res<Output> {
        Ok(self.command(dir, args).output()?)
    }

    fn ok(&self, dir: &Path, args: &[&str]) -> Res<Output> {
        let out = self.run(dir, args)?;
        if !out.status.success() {
            return Err(format!(
                "kart {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(out)
    }
}

/// The remote (said which), and a project built completely and pushed to it: the
/// reference every campaign compares with.
fn reference(env: &Env, root: &Path) -> Res<(RemoteHost, PathBuf)> {
    let remote = remote_host(root, env.file_remote)?;
    println!(
        "remote: {}",
        if remote._server.is_some() {
            "nginx on loopback"
        } else {
            "a file:// folder (nginx not installed)"
        }
    );
    let dir = root.join("reference");
    env.project(&dir, &remote)?;
    env.ok(&dir, &["build", "--no-remote"])?;
    env.ok(&dir, &["push"])?;
    Ok((remote, dir))
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn blob_files(dir: &Path) -> Vec<PathBuf> {
    walk(&dir.join("artifacts/v1/blobs"))
}

/// Kills `child` with SIGKILL, and the process groups of its children (nvcc runs in
/// its own group, which a kill of kart does not reach).
fn kill_hard(child: &mut Child) {
    let pid = child.id() as i32;
    let mut groups = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rsplit(')').next() else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(pid)
            && let Some(pgrp) = fields.get(2).and_then(|p| p.parse::<i32>().ok())
        {
            groups.push(pgrp);
        }
    }
    // SAFETY: signals to processes this program started (and their groups).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        for g in groups {
            if g != pid && g > 1 {
                libc::killpg(g, libc::SIGKILL);
            }
        }
    }
    let _ = child.wait();
}

/// What must hold after any crash: verify clean, the lock parses and names only blobs
/// present or in the remote, no temp file after the next open, a rerun completes with
/// the reference lock. Returns the failures.
fn check_after_crash(
    env: &Env,
    dir: &Path,
    remote: &Path,
    rerun: &[&str],
    reference: &str,
) -> Res<Vec<String>> {
    let mut failures = Vec::new();
    let verify = env.run(dir, &["verify", "--json"])?;
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap_or_default();
    let corrupt = report["blobs_corrupt"].as_array().map_or(0, Vec::len)
        + report["entries_corrupt"].as_array().map_or(0, Vec::len);
    if !verify.status.success() || corrupt > 0 {
        failures.push(format!(
            "verify: {corrupt} corrupt ({})",
            String::from_utf8_lossy(&verify.stderr).trim()
        ));
    }
    if let Some(missing) = report["missing"].as_array() {
        for d in missing.iter().filter_map(|d| d.as_str()) {
            if !remote.join("cas").join(d).is_file() {
                failures.push(format!(
                    "the lock names {d}, neither here nor in the remote"
                ));
            }
        }
    }
    if !env.run(dir, &["ls"])?.status.success() {
        failures.push("the lock does not parse".into());
    }
    let temps = walk(&dir.join("artifacts"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".tmp-kart-"))
        .count();
    if temps > 0 {
        failures.push(format!("{temps} temp files survived the next open"));
    }
    let again = env.run(dir, rerun)?;
    if !again.status.success() {
        failures.push(format!(
            "rerun {rerun:?} failed: {}",
            String::from_utf8_lossy(&again.stderr).trim()
        ));
    } else {
        env.ok(dir, &["build", "--no-remote"])?;
        let lock = std::fs::read_to_string(dir.join("kart.lock")).unwrap_or_default();
        if lock != reference {
            failures.push("after the rerun the lock differs from the reference".into());
        }
        if !env.run(dir, &["verify"])?.status.success() {
            failures.push("verify after the rerun".into());
        }
    }
    Ok(failures)
}

/// Removes a random part of the store so that the next command has work to do.
fn disturb(env: &mut Env, dir: &Path) {
    for f in walk(&dir.join("artifacts/v1/actions"))
        .into_iter()
        .chain(blob_files(dir))
    {
        if env.below(3) == 0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn crash(env: &mut Env, kills: usize) -> Res<bool> {
    let root = tempfile::tempdir()?;
    let (remote, reference_dir) = reference(env, root.path())?;
    let reference = std::fs::read_to_string(reference_dir.join("kart.lock"))?;
    let dir = root.path().join("victim");
    env.project(&dir, &remote)?;
    env.ok(&dir, &["build", "--no-remote"])?;
    let phases_file = root.path().join("phases.log");

    let mut histogram: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut survived, mut total, mut finished_first, mut rounds) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    // Failpoints first, each once, then random kills.
    // Writes are numbered (`@N`) so the aborts land on blob, entry and lock writes,
    // not only on the first file a command writes.
    let failpoints: Vec<(String, Vec<&str>)> = vec![
        ("build.compile".into(), vec!["build", "--no-remote"]),
        ("build.after-blob".into(), vec!["build", "--no-remote"]),
        ("lock.write".into(), vec!["build", "--no-remote"]),
        (
            format!("write-atomic.after-write@{}", 2 + env.below(6)),
            vec!["build", "--no-remote"],
        ),
        (
            format!("write-atomic.before-rename@{}", 2 + env.below(6)),
            vec!["build", "--no-remote"],
        ),
        (
            format!("write-atomic.after-rename@{}", 2 + env.below(6)),
            vec!["build", "--no-remote"],
        ),
        ("fetch.download".into(), vec!["fetch"]),
        ("fetch.store".into(), vec!["fetch"]),
        (
            format!("write-atomic.before-rename@{}", 1 + env.below(4)),
            vec!["fetch"],
        ),
        ("gc.remove".into(), vec!["gc"]),
    ];
    let commands: [&[&str]; 3] = [
        &["build", "--no-remote", "--jobs", "2"],
        &["fetch"],
        &["gc"],
    ];
    // Until `kills` random kills have landed (rounds whose command finished before its
    // kill are checked too, but not counted as kills).
    let mut random_kills = 0;
    while random_kills < kills && rounds < failpoints.len() + 10 * kills {
        let round = rounds;
        rounds += 1;
        let (args, failpoint): (Vec<&str>, Option<&str>) = match failpoints.get(round) {
            Some((fp, args)) => (args.clone(), Some(fp.as_str())),
            None => (commands[env.below(3) as usize].to_vec(), None),
        };
        // Give the command something to do.
        match args[0] {
            "gc" => {
                let store = kart::store::Store::open(
                    &dir.join("artifacts"),
                    kart::store::LockMode::Shared,
                    Duration::from_secs(30),
                )?;
                for i in 0..40 {
                    store.put_blob(format!("garbage {round} {i} {}", env.random()).as_bytes())?;
                }
            }
            _ => disturb(env, &dir),
        }
        let _ = std::fs::remove_file(&phases_file);
        let mut cmd = env.command(&dir, &args);
        cmd.env("KART_PHASE_LOG", &phases_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(fp) = failpoint {
            cmd.env("KART_FAILPOINT", fp);
        }
        let mut child = cmd.spawn()?;
        let killed = match failpoint {
            Some(_) => {
                let status = child.wait()?;
                !status.success()
            }
            None => {
                // Builds run for seconds (nvcc), fetch and gc for a few milliseconds
                // after a start of about as long.
                let window_ms = if args[0] == "build" { 2500 } else { 14 };
                let at = Duration::from_millis(env.below(window_ms));
                let start = Instant::now();
                let mut exited = false;
                while start.elapsed() < at {
                    if child.try_wait()?.is_some() {
                        exited = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                if !exited {
                    kill_hard(&mut child);
                }
                !exited
            }
        };
        let phase = if !killed {
            if failpoint.is_some() {
                "failpoint not reached".to_string()
            } else {
                "finished before the kill".to_string()
            }
        } else {
            std::fs::read_to_string(&phases_file)
                .unwrap_or_default()
                .lines()
                .last()
                .map_or("startup (no point reached)".to_string(), str::to_string)
        };
        let label = format!("{} / {}", args[0], phase);
        if killed {
            *histogram.entry(label.clone()).or_default() += 1;
            total += 1;
            if failpoint.is_none() {
                random_kills += 1;
            }
        } else {
            finished_first += 1;
        }
        let rerun: Vec<&str> = if args[0] == "fetch" {
            vec!["fetch"]
        } else {
            args.clone()
        };
        let found = check_after_crash(env, &dir, &remote.dir, &rerun, &reference)?;
        if found.is_empty() {
            survived += usize::from(killed);
        } else {
            failures.push(format!(
                "{label}{}: {}",
                failpoint
                    .map(|f| format!(" (failpoint {f})"))
                    .unwrap_or_default(),
                found.join("; ")
            ));
        }
    }
    println!(
        "crash campaign: {survived} of {total} crashes survived ({} failpoint aborts, {random_kills} random kills); {finished_first} more rounds finished before their kill and were checked the same way",
        total - random_kills
    );
    println!("where the kills landed (command / last point reached):");
    for (label, n) in &histogram {
        println!("  {n:>4}  {label}");
    }
    for f in &failures {
        println!("  FAILED: {f}");
    }
    println!(
        "corrupt entries or blobs found after crashes: {}",
        failures.iter().filter(|f| f.contains("corrupt")).count()
    );
    Ok(failures.is_empty())
}

fn corruption(env: &mut Env, cases: usize) -> Res<bool> {
    let root = tempfile::tempdir()?;
    let (remote, dir) = reference(env, root.path())?;
    let lock = std::fs::read_to_string(dir.join("kart.lock"))?;
    let digests: Vec<String> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("digest = \""))
        .map(|d| d.trim_end_matches('"').to_string())
        .collect();
    let (mut caught, mut injected) = (0, 0);
    let mut misses = Vec::new();
    let mut kinds: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for _ in 0..cases {
        let on_remote = env.below(3) == 0;
        let how = ["flip a bit", "truncate", "swap two"][env.below(3) as usize];
        let a = digests[env.below(digests.len() as u64) as usize].clone();
        let mut b = digests[env.below(digests.len() as u64) as usize].clone();
        while b == a {
            b = digests[env.below(digests.len() as u64) as usize].clone();
        }
        let path_of = |d: &str| -> PathBuf {
            if on_remote {
                remote.dir.join("cas").join(d)
            } else {
                let shard = dir.join("artifacts/v1/blobs").join(&d[..2]);
                let raw = shard.join(d);
                if raw.is_file() {
                    raw
                } else {
                    shard.join(format!("{d}.zst"))
                }
            }
        };
        let (pa, pb) = (path_of(&a), path_of(&b));
        let bytes = std::fs::read(&pa)?;
        let mut victims = vec![a.clone()];
        match how {
            "flip a bit" => {
                let mut changed = bytes.clone();
                let bit = env.below(changed.len() as u64 * 8) as usize;
                changed[bit / 8] ^= 1 << (bit % 8);
                std::fs::write(&pa, changed)?;
            }
            "truncate" => {
                let keep = env.below(bytes.len() as u64) as usize;
                std::fs::write(&pa, &bytes[..keep])?;
            }
            _ => {
                let other = std::fs::read(&pb)?;
                std::fs::write(&pa, &other)?;
                std::fs::write(&pb, &bytes)?;
                victims.push(b.clone());
            }
        }
        injected += victims.len();
        // Detect: the remote's blobs through a fetch into an empty store, the local ones
        // through verify or a read (`kart path`), at random.
        let detector;
        let mut found = 0;
        if on_remote {
            detector = "fetch";
            let fresh = root.path().join(format!("fresh-{}", env.random()));
            env.project(&fresh, &remote)?;
            std::fs::write(fresh.join("kart.lock"), &lock)?;
            let out = env.run(&fresh, &["fetch"])?;
            let err = String::from_utf8_lossy(&out.stderr);
            for v in &victims {
                let stored = blob_files(&fresh)
                    .iter()
                    .any(|p| p.to_string_lossy().contains(v.as_str()));
                if !out.status.success() && err.contains(v.as_str()) && !stored {
                    found += 1;
                }
            }
            std::fs::remove_dir_all(&fresh)?;
            // Repair the remote from the good local store.
            for v in &victims {
                let _ = std::fs::remove_file(remote.dir.join("cas").join(v));
            }
            env.ok(&dir, &["push"])?;
        } else {
            let use_verify = env.below(2) == 0;
            detector = if use_verify { "verify" } else { "path" };
            // One verify sees every victim; a read (`kart path`) sees one artifact.
            let verify_out = if use_verify {
                Some(env.run(&dir, &["verify"])?)
            } else {
                None
            };
            for v in &victims {
                let out = match &verify_out {
                    Some(out) => out.clone(),
                    None => {
                        let a = lock_artifact(&lock, v);
                        let mut args = vec!["path", "grid", "--target", a.1.as_str()];
                        for p in &a.0 {
                            args.push("-p");
                            args.push(p.as_str());
                        }
                        env.run(&dir, &args)?
                    }
                };
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let quarantined = walk(&dir.join("artifacts/v1/quarantine"))
                    .iter()
                    .any(|p| p.to_string_lossy().contains(v.as_str()));
                if !out.status.success() && text.contains(v.as_str()) && quarantined {
                    found += 1;
                }
            }
            // Repair: rebuild what was quarantined; clear the quarantine.
            env.ok(&dir, &["build", "--no-remote"])?;
            let _ = std::fs::remove_dir_all(dir.join("artifacts/v1/quarantine"));
            std::fs::create_dir_all(dir.join("artifacts/v1/quarantine"))?;
        }
        caught += found;
        let k = kinds
            .entry(format!(
                "{how} on the {} → {detector}",
                if on_remote { "remote" } else { "store" }
            ))
            .or_default();
        k.0 += victims.len();
        k.1 += found;
        if found < victims.len() {
            misses.push(format!("{how} of {a} ({detector})"));
        }
        env.ok(&dir, &["verify"])?;
    }
    println!(
        "corruption campaign: {caught} of {injected} corrupted blobs caught by digest and never used"
    );
    for (k, (n, c)) in &kinds {
        println!("  {c:>4}/{n:<4} {k}");
    }
    for m in &misses {
        println!("  MISSED: {m}");
    }
    Ok(misses.is_empty())
}

/// The params and target of the (first) artifact with `digest` in lock text.
fn lock_artifact(lock: &str, digest: &str) -> (Vec<String>, String) {
    let parsed = kart::store::lockfile::Lockfile::parse(lock, Path::new("kart.lock")).ok();
    parsed
        .and_then(|l| {
            l.artifacts
                .into_iter()
                .find(|a| a.digest == digest)
                .map(|a| {
                    (
                        a.config.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                        a.target,
                    )
                })
        })
        .unwrap_or_default()
}

fn concurrency(env: &mut Env, runs: usize) -> Res<bool> {
    let root = tempfile::tempdir()?;
    let (remote, reference_dir) = reference(env, root.path())?;
    let reference = std::fs::read_to_string(reference_dir.join("kart.lock"))?;
    let (mut conflicts, mut divergences) = (0, 0);
    for run in 0..runs {
        let dir = root.path().join(format!("run-{run}"));
        env.project(&dir, &remote)?;
        std::fs::write(dir.join("kart.lock"), &reference)?;
        let jobs: Vec<Vec<&str>> = vec![
            vec!["build", "--no-remote", "-p", "A=1", "--jobs", "1"],
            vec!["build", "--no-remote", "-p", "B=16", "--jobs", "1"],
            vec!["build", "--no-remote", "--target", "sm_90", "--jobs", "1"],
            vec![
                "build",
                "--no-remote",
                "-p",
                "A=1",
                "-p",
                "B=32",
                "--jobs",
                "1",
            ],
            vec!["gc"],
            vec!["fetch", "--jobs", "4"],
        ];
        let children: Vec<(Vec<&str>, Child)> = jobs
            .into_iter()
            .map(|args| {
                let child = env
                    .command(&dir, &args)
                    .arg("--lock-timeout")
                    .arg("300")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn();
                child.map(|c| (args, c))
            })
            .collect::<Result<_, _>>()?;
        for (args, child) in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                conflicts += 1;
                println!(
                    "  run {run}: kart {args:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        env.ok(&dir, &["build", "--no-remote"])?;
        let lock = std::fs::read_to_string(dir.join("kart.lock"))?;
        let clean = env.run(&dir, &["verify"])?.status.success();
        if lock != reference || !clean {
            divergences += 1;
            println!(
                "  run {run}: final state differs from the serial build (lock equal: {}, verify clean: {clean})",
                lock == reference
            );
        }
        std::fs::remove_dir_all(&dir)?;
    }
    println!(
        "concurrency campaign: {runs} runs of 4 builds + gc + fetch on one store: {conflicts} conflicts, {divergences} divergences"
    );
    Ok(conflicts == 0 && divergences == 0)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let short = args.iter().any(|a| a == "--short");
    let kart = value("--kart").map(PathBuf::from).unwrap_or_else(|| {
        std::env::current_exe()
            .map(|p| p.with_file_name("kart"))
            .unwrap_or_else(|_| "kart".into())
    });
    let nvcc = value("--nvcc")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".toolchain/py/nvidia/cu13/bin/nvcc"));
    let nvcc = std::fs::canonicalize(&nvcc)
        .map_err(|e| format!("nvcc at {}: {e} (pass --nvcc)", nvcc.display()))?;
    let seed: u64 = value("--seed").map_or(Ok(0x5EED_CAFE_F00D), |s| s.parse())?;
    let mut env = Env {
        kart,
        nvcc,
        rng: seed | 1,
        file_remote: args.iter().any(|a| a == "--file-remote"),
    };
    let number = |name: &str, short_n: usize, long_n: usize| -> usize {
        value(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(if short { short_n } else { long_n })
    };
    println!("seed {seed}");
    let ok = match args.get(1).map(String::as_str) {
        Some("crash") => crash(&mut env, number("--kills", 30, 200))?,
        Some("corruption") => corruption(&mut env, number("--cases", 60, 500))?,
        Some("concurrency") => concurrency(&mut env, number("--runs", 2, 20))?,
        _ => {
            eprintln!(
                "usage: kart-campaign crash|corruption|concurrency [--short] [--seed S] [--kills N|--cases N|--runs N]"
            );
            std::process::exit(2);
        }
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
