//! A folder's files and their content hash: the inputs of keys (include folders,
//! toolkit headers) and of library pins, and the headers a kernel's names are looked
//! for in.

use std::path::Path;

use crate::digest::{Preimage, sha256_file};
use crate::error::{IoContext, Result};

/// sha256 over every file under `dir`: sorted relative paths with their contents' hashes.
pub fn hash_tree(dir: &Path) -> Result<String> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files)?;
    files.sort();
    let mut p = Preimage::default();
    for rel in files {
        let hash = sha256_file(&dir.join(&rel))?;
        p.push(rel, hash);
    }
    Ok(p.digest("kart-tree-v1"))
}

/// Relative paths (with `/`) of every regular file under `dir`, following symlinks.
pub fn collect_files(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).at("list", dir)? {
        let entry = entry.at("list", dir)?;
        let path = entry.path();
        let meta = std::fs::metadata(&path).at("stat", &path)?;
        if meta.is_dir() {
            collect_files(base, &path, out)?;
        } else if meta.is_file() {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// Every regular file under `dir` (absolute paths), following symlinks; none if `dir`
/// does not exist.
pub fn files_under(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut rel = Vec::new();
    collect_files(dir, dir, &mut rel)?;
    Ok(rel.into_iter().map(|r| dir.join(r)).collect())
}
