//! What `kart build` is asked to do ([`BuildOptions`], [`Shard`]) and what it did
//! ([`BuildSummary`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::pipeline::plan::Selection;
use crate::pipeline::remote_exec;

/// One slice of a sharded build: `index` of `count` (1-based, as written: `--shard 2/4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 1..=count.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let err = || format!("`{s}` is not a shard: write I/N with 1 <= I <= N, e.g. 2/4");
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let index: usize = i.trim().parse().map_err(|_| err())?;
        let count: usize = n.trim().parse().map_err(|_| err())?;
        if index == 0 || count == 0 || index > count {
            return Err(err());
        }
        Ok(Shard { index, count })
    }
}

/// Options of `kart build`.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// What to build.
    pub selection: Selection,
    /// Parallel nvcc processes.
    pub jobs: usize,
    /// Per-nvcc timeout.
    pub timeout: Duration,
    /// Only compare keys with the lock.
    pub locked: bool,
    /// Build one slice; write only the store.
    pub shard: Option<Shard>,
    /// nvcc to use instead of searching.
    pub nvcc: Option<PathBuf>,
    /// How long to wait for another process's exclusive hold of the store.
    pub lock_timeout: Duration,
    /// The remote cache to read through (and, with `push`, write through).
    pub remote: Option<std::sync::Arc<crate::remote::Remote>>,
    /// Upload what the selection built or took to the remote.
    pub push: bool,
    /// Take a trusted remote's action entries without their blobs (a CI merge job
    /// that only writes the lock).
    pub entries_only: bool,
    /// Start no compile after the first failure.
    pub fail_fast: bool,
    /// Keep a failing compile's folder (the generated unit, nvcc's command line as
    /// `nvcc.sh`, its output) under the store's `kept/` for inspection.
    pub keep_temps: bool,
    /// Configs per front-end pass for kernels with template entries (`--batch`; 1
    /// compiles each alone); `None`: kart chooses ([`crate::pipeline::batch::auto_size`]).
    pub batch: Option<usize>,
    /// Run the compiles on a Remote Execution API server (`--executor`); `jobs` is then
    /// how many run there at once.
    pub executor: Option<remote_exec::ExecutorOptions>,
    /// Configs ptxas refuses for a resource limit do not fail the build: the `require`
    /// rule that excludes exactly them is added to their kernel.toml (with a comment
    /// saying why) and the rest is locked (`--skip-infeasible`).
    pub skip_infeasible: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            selection: Selection::default(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            timeout: Duration::from_secs(600),
            locked: false,
            shard: None,
            nvcc: None,
            lock_timeout: Duration::from_secs(60),
            remote: None,
            push: false,
            entries_only: false,
            fail_fast: false,
            keep_temps: false,
            batch: None,
            executor: None,
            skip_infeasible: false,
        }
    }
}

/// What a build did.
#[derive(Debug, Default, serde::Serialize)]
pub struct BuildSummary {
    /// Artifacts in the selection.
    pub selected: usize,
    /// Taken from the store.
    pub from_store: usize,
    /// Taken from the remote (entries from a trusted one, or blobs the lock names).
    pub from_remote: usize,
    /// Blobs downloaded from the remote.
    pub downloaded: usize,
    /// Compiled now.
    pub compiled: usize,
    /// Blobs uploaded with `push`.
    pub pushed: usize,
    /// Whether `kart.lock` changed.
    pub lock_changed: bool,
    /// Artifacts in the written lock, and in the project.
    pub lock_entries: (usize, usize),
    /// Lock digests found equal to their key's action entry (`--locked`).
    pub digests_matched: usize,
    /// Lock digests with no action entry to compare with (`--locked`).
    pub digests_unchecked: usize,
    /// What the remote executor did, when there was one.
    pub executor: Option<remote_exec::ExecStats>,
    /// Configs over a resource limit excluded by a rule `--skip-infeasible` recorded.
    pub excluded_infeasible: usize,
    /// Configs that share another config's compile (they differ only in launch-only
    /// params): recorded in the lock with its digest, not compiled again.
    pub shared_compiles: usize,
    /// Artifacts of the selection whose config `[prune]` left out of the lock.
    pub pruned: usize,
}
