//! What a home holds, and removing what no project uses: `kart toolchain list` and
//! `kart toolchain gc`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::home::Home;
use super::record::{Installed, read_record, record_path};
use super::shared;
use super::shared::Freed;
use super::usage;
use crate::error::{Error, IoContext, Result};

/// Every finished install in the home, toolchains first, with the projects that used
/// each.
pub fn list(home: &Home) -> Vec<Installed> {
    let uses = usage::all(&home.root);
    let mut out = Vec::new();
    for dir in [home.toolchains(), home.libraries()] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<Installed> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .filter_map(|path| {
                let record = read_record(&path)?;
                let bytes = shared::folder_bytes(&path);
                let installed_at = std::fs::metadata(record_path(&path))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let key = usage::install_key(&home.root, &path);
                let mut used: Vec<usage::Use> = uses
                    .iter()
                    .filter(|u| key.as_deref() == Some(u.install.as_str()))
                    .cloned()
                    .collect();
                used.sort_by(|a, b| b.at.cmp(&a.at).then(a.project.cmp(&b.project)));
                Some(Installed {
                    path,
                    record,
                    bytes: bytes.total,
                    own_bytes: bytes.own,
                    installed_at,
                    uses: used,
                })
            })
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        out.extend(found);
    }
    out
}

/// Which installs a gc removes.
#[derive(Clone, Debug)]
pub struct GcPolicy {
    /// Installs never removed: the current project's.
    pub keep: Vec<PathBuf>,
    /// Installs removed whenever they were last used (folder names or paths).
    pub named: Vec<String>,
    /// Installs no project used for this long (seconds) are removed.
    pub unused_for: u64,
}

/// One install a gc looked at: whether it goes, and why.
#[derive(Clone, Debug, Serialize)]
pub struct GcDecision {
    /// The install.
    pub install: Installed,
    /// Whether it is (or would be) removed.
    pub remove: bool,
    /// Why, in words.
    pub why: String,
}

/// `3 days`, `5 hours`, `12 minutes`, `40 seconds`.
pub fn ago(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s >= 2 * 86_400 => (s / 86_400, "days"),
        s if s >= 2 * 3600 => (s / 3600, "hours"),
        s if s >= 2 * 60 => (s / 60, "minutes"),
        s => (s, "seconds"),
    };
    format!("{n} {unit} ago")
}

fn last_use_words(installed: &Installed, now: u64) -> String {
    match installed.uses.first() {
        Some(u) => format!(
            "last used {} by {}",
            ago(now.saturating_sub(u.at)),
            crate::untrusted::for_terminal(&u.project.display().to_string())
        ),
        None => format!(
            "installed {} and used by no project since",
            ago(now.saturating_sub(installed.installed_at))
        ),
    }
}

/// What a gc under `policy` removes and keeps, install by install. A name in
/// `policy.named` that is no install is an error.
pub fn plan_gc(home: &Home, policy: &GcPolicy) -> Result<Vec<GcDecision>> {
    let installed = list(home);
    let now = usage::now();
    let names = |i: &Installed| {
        let file = i.path.file_name().map(|n| n.to_string_lossy().into_owned());
        let path = i.path.display().to_string();
        move |n: &String| Some(n) == file.as_ref() || *n == path
    };
    for n in &policy.named {
        if !installed.iter().any(|i| names(i)(n)) {
            let known: Vec<String> = installed
                .iter()
                .filter_map(|i| i.path.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            return Err(Error::usage(
                format!(
                    "no install named `{}` in {}",
                    crate::untrusted::for_terminal(n),
                    home.root.display()
                ),
                Some(if known.is_empty() {
                    "nothing is installed there".to_string()
                } else {
                    format!("the installs are: {}", known.join(", "))
                }),
            ));
        }
    }
    Ok(installed
        .into_iter()
        .map(|install| {
            let named = policy.named.iter().any(names(&install));
            let idle = now.saturating_sub(install.last_used());
            let (remove, why) = if policy.keep.contains(&install.path) {
                (false, "this project pins it".to_string())
            } else if named {
                (true, "named".to_string())
            } else if idle >= policy.unused_for {
                (true, last_use_words(&install, now))
            } else {
                (false, last_use_words(&install, now))
            };
            GcDecision {
                install,
                remove,
                why,
            }
        })
        .collect())
}

/// What a gc did (or would do): each install looked at, and what it removed of the
/// shared wheels and files.
#[derive(Clone, Debug, Serialize)]
pub struct GcOutcome {
    /// Every install, removed ones marked.
    pub decisions: Vec<GcDecision>,
    /// Cached wheels and shared files removed (a dry run: the wheels only, as the
    /// files no install would link are known only once the installs are gone).
    pub freed: Freed,
}

/// The sha256 of every wheel the installs that stay were unpacked from.
fn wheels_kept(decisions: &[GcDecision]) -> BTreeSet<String> {
    decisions
        .iter()
        .filter(|d| !d.remove)
        .flat_map(|d| d.install.record.wheels.iter().map(|(_, sha)| sha.clone()))
        .collect()
}

/// What a gc under `policy` would do, removing nothing.
pub fn plan(home: &Home, policy: &GcPolicy) -> Result<GcOutcome> {
    let decisions = plan_gc(home, policy)?;
    let mut freed = Freed::default();
    for (_, bytes) in shared::unused_wheels(&home.root, &wheels_kept(&decisions)) {
        freed.wheels += 1;
        freed.wheel_bytes += bytes;
    }
    Ok(GcOutcome { decisions, freed })
}

/// Removes the installs `policy` names or finds unused, never `policy.keep`, and
/// leftovers of unfinished installs; then the cached wheels no install that stays was
/// unpacked from, and the shared files no install links any more.
pub fn gc(home: &Home, policy: &GcPolicy) -> Result<GcOutcome> {
    let _lock = home.lock(Duration::from_secs(60))?;
    let decisions = plan_gc(home, policy)?;
    for d in decisions.iter().filter(|d| d.remove) {
        let path = &d.install.path;
        let _ = std::fs::remove_file(record_path(path));
        std::fs::remove_dir_all(path).at("remove", path)?;
    }
    let kept: Vec<String> = decisions
        .iter()
        .filter(|d| !d.remove)
        .filter_map(|d| usage::install_key(&home.root, &d.install.path))
        .collect();
    // Uses of removed installs, and unreadable use files, go too.
    usage::prune(&home.root, |u| kept.contains(&u.install))?;
    for dir in [home.toolchains(), home.libraries()] {
        // Folders without a record are installs that never finished (their temporary
        // folders included).
        crate::store::fsutil::sweep_temp_files_shallow(&dir);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.filter_map(|e| e.ok()) {
                let p = e.path();
                if p.is_dir() && read_record(&p).is_none() {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
    }
    // Earlier versions downloaded into `downloads/` and removed each wheel once
    // unpacked: what is left there is a killed install's.
    let _ = std::fs::remove_dir_all(home.root.join("downloads"));
    // Fingerprints of removed installs would stay forever: the cache is rebuilt by the
    // next build that needs it.
    let _ = std::fs::remove_dir_all(home.fingerprints());
    let freed = shared::gc(&home.root, &wheels_kept(&decisions))?;
    Ok(GcOutcome { decisions, freed })
}
