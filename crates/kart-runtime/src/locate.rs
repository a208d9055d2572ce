//! Finding a project from any folder inside it: the folder holding `kart.toml`, and
//! where its store is. Only the `[project]` keys that place the store are read here: a
//! program that loads cubins needs nothing else of `kart.toml`, and no `kernel.toml`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, IoContext, Result};
use crate::text::{Limit, SourceFile, read_text};

/// The project manifest's file name.
pub const PROJECT_FILE: &str = "kart.toml";

/// A project's root and store, as a loader needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectPaths {
    /// The folder holding `kart.toml` (absolute).
    pub root: PathBuf,
    /// The store folder (absolute).
    pub store_dir: PathBuf,
}

/// The folder holding `kart.toml`: `start` or the nearest of its parents that has one.
pub fn find_root(start: &Path) -> Result<PathBuf> {
    let start = std::fs::canonicalize(start).at("resolve", start)?;
    let mut dir = start.as_path();
    loop {
        if dir.join(PROJECT_FILE).is_file() {
            return Ok(dir.to_path_buf());
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => {
                return Err(Error::usage(
                    format!(
                        "no `{PROJECT_FILE}` in `{}` or any parent folder",
                        start.display()
                    ),
                    Some(format!(
                        "run kart inside a project, or create `{PROJECT_FILE}` (`kart init`)"
                    )),
                ));
            }
        }
    }
}

/// Finds the project of `start` and its store, reading only `[project]`'s `store` and
/// `store_outside_project` (the rest of the file is the build's business).
pub fn project(start: &Path) -> Result<ProjectPaths> {
    #[derive(Deserialize)]
    struct Paths {
        project: Option<Section>,
    }
    #[derive(Deserialize)]
    struct Section {
        store: Option<Spanned<String>>,
        #[serde(default)]
        store_outside_project: bool,
    }
    let root = find_root(start)?;
    let text = read_text(&root.join(PROJECT_FILE), Limit::MANIFEST)?;
    let file = SourceFile {
        path: PathBuf::from(PROJECT_FILE),
        text: &text,
    };
    let paths: Paths = file.parse()?;
    let (store, outside) = paths
        .project
        .map_or((None, false), |p| (p.store, p.store_outside_project));
    let store_dir = store_dir(&file, &root, store.as_ref(), outside)?;
    Ok(ProjectPaths { root, store_dir })
}

/// Where the store is (absolute), from `[project]`'s `store` (default `artifacts`).
/// It stays inside the project unless `store_outside_project = true` says otherwise
/// in so many words: a cloned project must not choose a folder elsewhere on the
/// machine for kart to write into.
pub fn store_dir(
    file: &SourceFile<'_>,
    root: &Path,
    store: Option<&Spanned<String>>,
    store_outside_project: bool,
) -> Result<PathBuf> {
    Ok(match store {
        Some(s) if store_outside_project => {
            let p = Path::new(s.get_ref());
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                root.join(p)
            }
        }
        Some(s) => {
            let inside = file.inside_root(root, root, s, "store").map_err(|e| {
                e.with_hint(
                    "keep the store inside the project, or add `store_outside_project = true` to [project] to mean it",
                )
            })?;
            root.join(inside)
        }
        None => {
            // The default folder too may be a committed symlink to elsewhere.
            let dir = root.join("artifacts");
            match crate::text::real_path(&dir) {
                Some(real) if real.starts_with(root) || store_outside_project => dir,
                _ => {
                    return Err(Error::usage(
                        format!(
                            "the store `{}` leads out of the project through a symlink",
                            dir.display()
                        ),
                        Some(
                            "replace the link by a folder, or add `store_outside_project = true` to [project] to mean it"
                                .into(),
                        ),
                    ));
                }
            }
        }
    })
}
