//! Remote-execution benchmark: a cold build of the repository's kernels (the commit's
//! tree, an empty store) compiled here, then through a BuildGrid on loopback with
//! `--workers` test workers (`kart_testkit::bgd_exec`), twice: first against an empty
//! server (every input uploaded, every action run), then again from another empty store
//! (the toolkit already there, every action a hit of the server's action cache). Prints
//! wall times, what the executor did per build (`kart build --json`: uploads, time to
//! prepare, queue, run and download per action), and whether every lock names the
//! committed kart.lock's digests. Asserts nothing.
//!
//! ```text
//! kart-bench-exec [--kart target/release/kart] [--workers 2] [-- BUILD ARGS...]
//! ```
//!
//! BUILD ARGS select what to build (`cute_gemm`, `-p BM=64`, ...; default: everything).
//! Needs what `scripts/test` installs (BuildGrid, PostgreSQL) and `scripts/setup`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use kart_testkit::bgd_exec::{BuildGridExec, WorkerMode};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The commit's tree in `dir` (`git archive HEAD | tar -x`).
fn checkout(repo: &Path, dir: &Path) -> Res<()> {
    let mut archive = Command::new("git")
        .args(["archive", "HEAD"])
        .current_dir(repo)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = archive.stdout.take().ok_or("git archive: no stdout")?;
    let status = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dir)
        .stdin(stdout)
        .status()?;
    if !archive.wait()?.success() || !status.success() {
        return Err("git archive | tar -x failed".into());
    }
    Ok(())
}

/// Runs `kart build --json ARGS` in `tree` from an empty store; wall seconds and the
/// JSON summary.
fn build(kart: &Path, tree: &Path, args: &[String]) -> Res<(f64, serde_json::Value)> {
    let store = tree.join("artifacts");
    if store.exists() {
        std::fs::remove_dir_all(&store)?;
    }
    let start = Instant::now();
    let out = Command::new(kart)
        .arg("-C")
        .arg(tree)
        .args(["build", "--json"])
        .args(args)
        .output()?;
    let wall = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("kart build {args:?} failed:\n{stderr}").into());
    }
    for line in stderr
        .lines()
        .filter(|l| l.contains("executor") || l.contains("warning"))
    {
        println!("  | {line}");
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((wall, json))
}

/// How many of the committed lock's digests `tree`'s lock names for the same artifact.
fn same_digests(repo: &Path, tree: &Path) -> Res<String> {
    let digests = |p: &Path| -> Res<std::collections::BTreeSet<String>> {
        Ok(std::fs::read_to_string(p.join("kart.lock"))?
            .lines()
            .filter_map(|l| l.strip_prefix("digest = \""))
            .map(|d| d.trim_end_matches('"').to_string())
            .collect())
    };
    let built = digests(tree)?;
    let committed = digests(repo)?;
    Ok(format!(
        "{} of the build's {} digests are in the committed kart.lock",
        built.intersection(&committed).count(),
        built.len()
    ))
}

fn main() -> Res<()> {
    let mut kart = PathBuf::from("target/release/kart");
    let mut workers = 2usize;
    let mut build_args: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--kart" => kart = PathBuf::from(args.next().ok_or("--kart needs a path")?),
            "--workers" => workers = args.next().ok_or("--workers needs a number")?.parse()?,
            "--" => build_args.extend(args.by_ref()),
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let repo = std::env::current_dir()?;
    let kart = std::fs::canonicalize(&kart)?;
    let tree = tempfile::tempdir()?;
    checkout(&repo, tree.path())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{cores} cores; selection {:?}; {workers} workers",
        if build_args.is_empty() {
            vec!["all".to_string()]
        } else {
            build_args.clone()
        }
    );

    let mut local_args = build_args.clone();
    local_args.push("--no-executor".into());
    let (wall, _) = build(&kart, tree.path(), &local_args)?;
    println!("here: {wall:.1} s; {}", same_digests(&repo, tree.path())?);

    let start = Instant::now();
    let grid = BuildGridExec::start(&vec![WorkerMode::Normal; workers])?;
    println!(
        "BuildGrid, PostgreSQL and workers started in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let mut remote_args = build_args.clone();
    remote_args.extend(["--executor".to_string(), grid.url()]);
    for round in ["first (empty server)", "second (another empty store)"] {
        let (wall, json) = build(&kart, tree.path(), &remote_args)?;
        println!(
            "executor, {round}: {wall:.1} s; {}",
            same_digests(&repo, tree.path())?
        );
        if let Some(stats) = json["summary"].get("executor") {
            println!("  {stats}");
        }
    }
    Ok(())
}
