//! Which projects used which install of kart's home, and when: one small file per
//! (install, project) in the home's `used/` folder, named by the sha256 of the two and
//! holding them with the time. A project that resolves its toolchain writes its file
//! (at most once an hour), so `kart toolchain gc` in one project can tell the installs
//! other projects still use from the ones nothing has used for a long time.
//!
//! The files are the home's own but still read as untrusted: each is bounded, checked
//! against its own name, and one that fails is skipped (and removed by a gc).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::error::{IoContext, Result};
use crate::store::fsutil::write_atomic;

/// The folder, under the home.
pub const FOLDER: &str = "used";

/// The files' format.
const FORMAT: u32 = 1;

/// A use is written again only when the recorded one is older than this (seconds): a
/// build a second does not write a file a second.
const REFRESH_SECONDS: u64 = 3600;

/// The most use files read; beyond, the rest are ignored (and a gc removes the stale).
const MAX_FILES: usize = 10_000;

/// The most bytes one use file may hold.
const MAX_BYTES: u64 = 64 << 10;

/// One project's latest use of one install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Use {
    /// The file's format.
    pub format: u32,
    /// The install, relative to the home: `toolchains/13.0-…` or `libraries/NAME-…`.
    pub install: String,
    /// The project's root folder.
    pub project: PathBuf,
    /// When, in seconds since the Unix epoch.
    pub at: u64,
}

/// Seconds since the Unix epoch, now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn file_of(home: &Path, install: &str, project: &Path) -> PathBuf {
    let mut key = format!("kart-install-use-v1\n{install}\n").into_bytes();
    key.extend_from_slice(project.as_os_str().as_encoded_bytes());
    home.join(FOLDER)
        .join(format!("{}.json", &sha256_hex(&key)[..32]))
}

/// `folder` relative to `home`, when it is an install folder of it
/// (`toolchains/NAME` or `libraries/NAME`).
pub fn install_key(home: &Path, folder: &Path) -> Option<String> {
    let relative = folder.strip_prefix(home).ok()?;
    let parts: Vec<&str> = relative
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [kind @ ("toolchains" | "libraries"), name] if !name.starts_with('.') => {
            Some(format!("{kind}/{name}"))
        }
        _ => None,
    }
}

/// Records that the project at `project` uses the install `folder` of the home
/// `home` now, unless its recorded use is recent. Written atomically.
pub fn record(home: &Path, folder: &Path, project: &Path) -> Result<()> {
    let Some(install) = install_key(home, folder) else {
        return Ok(());
    };
    let file = file_of(home, &install, project);
    let now = now();
    if let Some(known) = read(home, &file)
        && known.at <= now
        && now - known.at < REFRESH_SECONDS
    {
        return Ok(());
    }
    let used = Use {
        format: FORMAT,
        install,
        project: project.to_path_buf(),
        at: now,
    };
    // A project path that is not UTF-8 cannot be written as JSON: its use goes
    // unrecorded, and the install counts from when it was installed.
    let Ok(json) = serde_json::to_vec_pretty(&used) else {
        return Ok(());
    };
    write_atomic(&file, &json)
}

/// The use in `file`, if it is a well-formed one of `home` whose name matches it.
fn read(home: &Path, file: &Path) -> Option<Use> {
    let bytes = kart_runtime::text::read_limited(
        file,
        kart_runtime::text::Limit {
            what: "a record of an install's use",
            bytes: MAX_BYTES,
        },
    )
    .ok()?;
    let used: Use = serde_json::from_slice(&bytes).ok()?;
    let valid = used.format == FORMAT
        && used.project.is_absolute()
        && install_key(home, &home.join(&used.install)).as_deref() == Some(&used.install)
        && file_of(home, &used.install, &used.project) == file;
    valid.then_some(used)
}

/// The use files of `home`: (file, what it says when it is valid). At most
/// [`MAX_FILES`].
fn files(home: &Path) -> Vec<(PathBuf, Option<Use>)> {
    let Ok(entries) = std::fs::read_dir(home.join(FOLDER)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".json")))
        .take(MAX_FILES)
        .map(|e| {
            let path = e.path();
            let used = read(home, &path);
            (path, used)
        })
        .collect()
}

/// Every valid use recorded in `home`.
pub fn all(home: &Path) -> Vec<Use> {
    files(home).into_iter().filter_map(|(_, u)| u).collect()
}

/// Removes the use files that are invalid, or whose install `keep` rejects.
pub fn prune(home: &Path, keep: impl Fn(&Use) -> bool) -> Result<()> {
    for (file, used) in files(home) {
        if !used.as_ref().is_some_and(&keep) {
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).at("remove", &file);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_is_recorded_once_an_hour_and_read_back_only_when_valid() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let install = home.join("toolchains/13.0-abc");
        let project_dir = home.join("some-project");
        let project = project_dir.as_path();
        record(home, &install, project).unwrap();
        let found = all(home);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].install, "toolchains/13.0-abc");
        assert_eq!(found[0].project, project);
        let file = file_of(home, "toolchains/13.0-abc", project);

        // A recent use is not written again.
        let old = Use {
            at: found[0].at - 10,
            ..found[0].clone()
        };
        std::fs::write(&file, serde_json::to_vec(&old).unwrap()).unwrap();
        record(home, &install, project).unwrap();
        assert_eq!(all(home)[0].at, old.at);
        // An old one is.
        let older = Use {
            at: found[0].at - 2 * REFRESH_SECONDS,
            ..old.clone()
        };
        std::fs::write(&file, serde_json::to_vec(&older).unwrap()).unwrap();
        record(home, &install, project).unwrap();
        assert!(all(home)[0].at >= found[0].at);

        // Not an install folder: nothing recorded.
        record(home, &home.join("elsewhere/x"), project).unwrap();
        record(home, &dir.path().join("outside/x"), project).unwrap();
        assert_eq!(all(home).len(), 1);

        // A file claiming another install than its name, garbage, or one too big is
        // skipped, and pruned.
        let moved = Use {
            install: "toolchains/13.0-other".into(),
            ..older
        };
        let folder = home.join(FOLDER);
        std::fs::write(folder.join("a.json"), serde_json::to_vec(&moved).unwrap()).unwrap();
        std::fs::write(folder.join("b.json"), "{").unwrap();
        std::fs::write(folder.join("c.json"), vec![b' '; MAX_BYTES as usize + 1]).unwrap();
        assert_eq!(all(home).len(), 1);
        prune(home, |_| true).unwrap();
        assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 1);
        prune(home, |u| u.install != "toolchains/13.0-abc").unwrap();
        assert!(all(home).is_empty());
    }

    #[test]
    fn only_install_folders_have_a_key() {
        let home = Path::new("/h");
        assert_eq!(
            install_key(home, Path::new("/h/toolchains/13.0-x")).as_deref(),
            Some("toolchains/13.0-x")
        );
        for bad in [
            "/h/toolchains",
            "/h/toolchains/a/b",
            "/h/downloads/x",
            "/h/toolchains/.tmp-x",
            "/other/toolchains/x",
        ] {
            assert_eq!(install_key(home, Path::new(bad)), None, "{bad}");
        }
    }
}
