//! Headers from outside the project: toolkit components installed beside nvcc
//! (`[toolchain] components`) and header-only libraries such as CUTLASS/CuTe
//! (`[library.NAME]`), each pinned by version and content.
//!
//! A library's content hash covers every file under its include folder. Hashing
//! thousands of headers on every build would cost more than a no-op build, so the hash
//! is cached with the stamp (size, mtime, ctime, inode) of every file, once per machine
//! ([`super::stamp`]), and recomputed only when one changes or a file comes or goes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::error::{Error, Result};
use crate::project::library::{LIBRARY_PREFIX, Library, LibrarySource, parse_pin};
use crate::toolchain::stamp::{CacheDirs, Stamp};
use crate::tree::{collect_files, hash_tree};

/// A library's pin as the build uses it: include folder and content hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryPin {
    /// The folder nvcc gets with `-I`, relative to the project root.
    pub include: PathBuf,
    /// The pip pin or `vendored`.
    pub version: String,
    /// sha256 over the folder's files (sorted paths and contents' hashes).
    pub sha256: String,
}

/// Checks that every declared component is installed in the site folder nvcc came from
/// (its `.dist-info` with that version), so a header it provides is the pinned one.
pub fn check_components(toolkit_root: &Path, components: &[String]) -> Result<()> {
    if components.is_empty() {
        return Ok(());
    }
    // Wheels install nvcc as SITE/nvidia/cu13/bin/nvcc; components beside it share SITE.
    let site = toolkit_root
        .parent()
        .and_then(Path::parent)
        .unwrap_or(toolkit_root);
    let installed: Vec<String> = std::fs::read_dir(site)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".dist-info"))
                .collect()
        })
        .unwrap_or_default();
    for spec in components {
        let Some((name, version)) = parse_pin(spec) else {
            continue;
        };
        let want = format!(
            "{}-{version}.dist-info",
            name.replace(['-', '.'], "_").to_lowercase()
        );
        if !installed.iter().any(|n| n.to_lowercase() == want) {
            return Err(Error::environment(
                format!(
                    "kart.toml needs the toolkit component `{spec}`, which is not installed beside nvcc (no `{want}` in `{}`)",
                    site.display()
                ),
                "run `kart toolchain install`: it installs the components kart.toml lists next to the pinned nvcc",
            ));
        }
    }
    Ok(())
}

/// The pin of `library`: its content hash (cached by file stamps in `cache`), checked
/// against the declared one.
///
/// A pip library is looked for under the project's `.toolchain/lib/NAME`, then in
/// kart's home (`kart toolchain install`).
pub fn pin(
    root: &Path,
    library: &Library,
    cache: &CacheDirs,
    home: Option<&crate::install::Home>,
) -> Result<LibraryPin> {
    let mut dir = root.join(&library.include);
    let in_project = root.join(LIBRARY_PREFIX).join(&library.name);
    if !dir.is_dir()
        && let Some(home) = home
        && let Some(installed) = crate::install::installed_library(home, library)
        && let Ok(inside) = dir.strip_prefix(&in_project)
    {
        dir = installed.join(inside);
    }
    if !dir.is_dir() {
        let hint = match &library.source {
            LibrarySource::Pip(spec) => {
                format!("run `kart toolchain install`: it installs `{spec}`")
            }
            LibrarySource::Path => "fix `path` in kart.toml, or add the folder".to_string(),
        };
        return Err(Error::environment(
            format!(
                "header library `{}`: its include folder `{}` does not exist",
                library.name,
                library.include.display()
            ),
            hint,
        ));
    }
    let sha256 = cached_tree_hash(&dir, cache)?;
    if let Some(declared) = &library.sha256
        && *declared != sha256
    {
        return Err(Error::environment(
            format!(
                "header library `{}` ({}) at `{}` has content sha256 {sha256}, but kart.toml pins {declared}",
                library.name,
                library.version(),
                library.include.display()
            ),
            "its files changed or another version is installed: reinstall it (`kart toolchain gc`, then `kart toolchain install`), or pin the new content with `sha256` in kart.toml",
        ));
    }
    if library.sha256.is_none() && matches!(library.source, LibrarySource::Pip(_)) {
        return Err(Error::environment(
            format!(
                "header library `{}` ({}) is pinned by version only",
                library.name,
                library.version()
            ),
            format!(
                "pin its content too: add `sha256 = \"{sha256}\"` to [library.{}] in kart.toml",
                library.name
            ),
        ));
    }
    Ok(LibraryPin {
        include: dir
            .strip_prefix(root)
            .map_or_else(|_| dir.clone(), Path::to_path_buf),
        version: library.version(),
        sha256,
    })
}

#[derive(Serialize, Deserialize)]
struct CachedHash {
    version: u32,
    stamps: Vec<Stamp>,
    sha256: String,
}

/// 2: stamps with ctime, inode and device; the cache in kart's home.
const CACHE_VERSION: u32 = 2;

/// The tree hash of `dir`, recomputed only when a file's stamp changed or a file came
/// or went.
fn cached_tree_hash(dir: &Path, cache: &CacheDirs) -> Result<String> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files)?;
    files.sort();
    let stamps: Vec<Stamp> = files
        .iter()
        .map(|rel| Stamp::of(&dir.join(rel), PathBuf::from(rel)))
        .collect();
    let abs = std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf());
    let cache_file = format!(
        "library-{}.json",
        &sha256_hex(abs.as_os_str().as_encoded_bytes())[..24]
    );
    let hit = cache.read::<CachedHash>(&cache_file, |cached| {
        cached.version == CACHE_VERSION
            && cached.stamps == stamps
            && crate::digest::is_sha256_hex(&cached.sha256)
    });
    if let Some(cached) = hit {
        return Ok(cached.sha256);
    }
    let sha256 = hash_tree(dir)?;
    let cached = CachedHash {
        version: CACHE_VERSION,
        stamps,
        sha256,
    };
    cache.write(&cache_file, &cached, &cached.stamps);
    Ok(cached.sha256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_name_equals_version() {
        assert_eq!(
            parse_pin("nvidia-cutlass==4.2.0.0"),
            Some(("nvidia-cutlass", "4.2.0.0"))
        );
        for bad in [
            "nvidia-cutlass",
            "nvidia-cutlass>=4",
            "==4",
            "x==",
            "a b==1",
        ] {
            assert_eq!(parse_pin(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_cached_hash_follows_edits() {
        let lib = tempfile::tempdir().unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = CacheDirs(vec![cache_dir.path().to_path_buf()]);
        std::fs::create_dir_all(lib.path().join("cute")).unwrap();
        std::fs::write(lib.path().join("cute/a.hpp"), "int a;").unwrap();
        let first = cached_tree_hash(lib.path(), &cache).unwrap();
        assert_eq!(first, cached_tree_hash(lib.path(), &cache).unwrap());
        std::fs::write(lib.path().join("cute/a.hpp"), "int a; int b;").unwrap();
        let edited = cached_tree_hash(lib.path(), &cache).unwrap();
        assert_ne!(first, edited);
        assert_eq!(edited, hash_tree(lib.path()).unwrap());
    }
}
