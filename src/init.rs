//! `kart init`: a new project in a folder — `kart.toml` pinning the toolchain kart
//! installs, the smoke kernel under `kernels/`, the store and toolchain folders in
//! `.gitignore`, and a CI workflow that checks the lock on pull requests and builds
//! with write access only on the main branch. A folder that already has a `kart.toml`
//! is left exactly as it is; existing files are never overwritten.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::project::PROJECT_FILE;
use crate::store::fsutil::write_atomic;

const KART_TOML: &str = r#"# kart project manifest: every key is in kart's README ("File formats").
[project]
kernels = "kernels"          # each subfolder with a kernel.toml is a kernel
store = "artifacts"          # the local store (ignored by git)
targets = ["sm_80", "sm_90"] # default targets of every kernel

[toolchain]
nvcc = "13.0"                # installed by `kart toolchain install`, part of every key
"#;

const SMOKE_TOML: &str = r#"# The smoke kernel: the smallest proof that the toolchain (and, at run time, a GPU)
# works end to end. `kart smoke` runs it; keep it, and add your kernels beside it.
name = "smoke"
sources = ["smoke.cu"]
entry = ["kart_smoke_axpb"]
flags = ["-O3"]

[signature]
kart_smoke_axpb = ["ptr", "ptr", "f32", "f32", "i32"]
"#;

const GITIGNORE_LINES: &[&str] = &["/artifacts/", "/.toolchain/"];

const WORKFLOW: &str = r#"# kart: check kart.lock on pull requests, build and share artifacts from main.
#
# Set the repository variable KART_GIT to the git URL kart is installed from, and, for a
# remote cache, the secrets KART_REMOTE (its URL), KART_REMOTE_READ_TOKEN (reads only)
# and KART_REMOTE_TOKEN (writes; keep it in the environment `kart-cache-write`, limited
# to the protected branch). Pull requests run code nobody reviewed yet: they get the
# read token and write nothing. For an S3 cache (KART_REMOTE = s3://bucket/prefix),
# see the commented lines: pull requests read a public bucket unsigned, and only main
# gets AWS credentials.
name: kart
on:
  push:
    branches: [main]
  pull_request:

permissions:
  contents: read

jobs:
  check:
    if: github.event_name == 'pull_request'
    runs-on: ubuntu-latest
    env:
      KART_REMOTE: ${{ secrets.KART_REMOTE }}
      KART_REMOTE_TOKEN: ${{ secrets.KART_REMOTE_READ_TOKEN }}
      # S3: no credentials; unsigned requests, read-only (the bucket allows public reads).
      # KART_REMOTE_ANONYMOUS: "1"
      # AWS_REGION: eu-west-1
    steps:
      - uses: actions/checkout@v4
      - run: cargo install --locked --git "${{ vars.KART_GIT }}" kart
      - run: kart toolchain install
      - run: kart build --locked
      - run: kart build --read-only

  build:
    if: github.event_name == 'push'
    runs-on: ubuntu-latest
    environment: kart-cache-write
    env:
      KART_REMOTE: ${{ secrets.KART_REMOTE }}
      KART_REMOTE_TOKEN: ${{ secrets.KART_REMOTE_TOKEN }}
      # S3: write credentials, in the environment `kart-cache-write` (or a role through
      # OIDC: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE).
      # AWS_ACCESS_KEY_ID: ${{ secrets.AWS_ACCESS_KEY_ID }}
      # AWS_SECRET_ACCESS_KEY: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
      # AWS_REGION: eu-west-1
    steps:
      - uses: actions/checkout@v4
      - run: cargo install --locked --git "${{ vars.KART_GIT }}" kart
      - run: kart toolchain install
      - run: kart build --locked
      - run: kart build --push
"#;

/// What `init` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InitReport {
    /// The project folder.
    pub root: PathBuf,
    /// True when it already was a project: nothing was changed.
    pub existing: bool,
    /// Files written, relative to the root.
    pub created: Vec<PathBuf>,
    /// Files that were there already and were left alone.
    pub kept: Vec<PathBuf>,
    /// `.gitignore` lines added.
    pub ignored: Vec<String>,
}

/// Makes `dir` a kart project (see the module's documentation).
pub fn init(dir: &Path, smoke_source: &str) -> Result<InitReport> {
    let mut report = InitReport {
        root: dir.to_path_buf(),
        ..InitReport::default()
    };
    if dir.join(PROJECT_FILE).exists() {
        report.existing = true;
        return Ok(report);
    }
    refuse_symlinks(dir)?;
    std::fs::create_dir_all(dir).at("create", dir)?;
    let files: [(&str, &str); 4] = [
        ("kernels/smoke/kernel.toml", SMOKE_TOML),
        ("kernels/smoke/smoke.cu", smoke_source),
        (".github/workflows/kart.yml", WORKFLOW),
        // Last: a folder with kart.toml is a project, and init never touches one again.
        (PROJECT_FILE, KART_TOML),
    ];
    for (relative, text) in files {
        let path = dir.join(relative);
        if path.exists() {
            report.kept.push(relative.into());
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).at("create", parent)?;
        }
        write_atomic(&path, text.as_bytes())?;
        report.created.push(relative.into());
    }
    let gitignore = dir.join(".gitignore");
    let mut text = if gitignore.symlink_metadata().is_ok() {
        kart_runtime::text::read_text(&gitignore, kart_runtime::text::Limit::MANIFEST)?
    } else {
        String::new()
    };
    for line in GITIGNORE_LINES {
        if !text.lines().any(|l| l.trim() == *line) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(line);
            text.push('\n');
            report.ignored.push(line.to_string());
        }
    }
    if !report.ignored.is_empty() {
        write_atomic(&gitignore, text.as_bytes())?;
    }
    Ok(report)
}

/// Every path `init` reads or writes, relative to the project folder.
const TOUCHED: &[&str] = &[
    PROJECT_FILE,
    ".gitignore",
    ".github",
    ".github/workflows",
    ".github/workflows/kart.yml",
    "kernels",
    "kernels/smoke",
    "kernels/smoke/kernel.toml",
    "kernels/smoke/smoke.cu",
];

/// Refuses, before anything is written, a folder where any path `init` would read or
/// write is a symlink: a cloned repository may hold `.gitignore` linked to a secret
/// (whose text init would copy into a new world-readable file) or `.github` linked to a
/// folder elsewhere (which init would write into).
fn refuse_symlinks(dir: &Path) -> Result<()> {
    let links: Vec<String> = TOUCHED
        .iter()
        .filter_map(|relative| {
            let path = dir.join(relative);
            let meta = path.symlink_metadata().ok()?;
            if !meta.file_type().is_symlink() {
                return None;
            }
            let target = std::fs::read_link(&path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            Some(format!(
                "`{relative}` (→ {})",
                kart_runtime::untrusted::for_terminal(&target)
            ))
        })
        .collect();
    if links.is_empty() {
        return Ok(());
    }
    Err(Error::usage(
        format!(
            "`{}`: kart init neither reads nor writes through symlinks, and {} {}: nothing was written",
            dir.display(),
            links.join(", "),
            if links.len() == 1 { "is one" } else { "are symlinks" }
        ),
        Some(
            "replace each link by the file or folder itself (or remove it), then run `kart init` again"
                .into(),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_scaffolds_once_and_keeps_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        std::fs::create_dir_all(root.join(".github/workflows")).unwrap();
        std::fs::write(root.join(".github/workflows/kart.yml"), "mine\n").unwrap();
        std::fs::write(root.join(".gitignore"), "/target").unwrap();
        let report = init(&root, "// smoke\n").unwrap();
        assert!(!report.existing);
        assert_eq!(report.kept, [PathBuf::from(".github/workflows/kart.yml")]);
        assert_eq!(report.created.len(), 3);
        assert_eq!(
            std::fs::read_to_string(root.join(".github/workflows/kart.yml")).unwrap(),
            "mine\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join(".gitignore")).unwrap(),
            "/target\n/artifacts/\n/.toolchain/\n"
        );
        let project = crate::project::Project::load(&root).unwrap();
        assert_eq!(project.kernels.len(), 1);
        assert_eq!(project.nvcc_release.as_deref(), Some("13.0"));
        // A second run changes nothing.
        let before = std::fs::read_to_string(root.join(PROJECT_FILE)).unwrap();
        let again = init(&root, "// other\n").unwrap();
        assert!(again.existing && again.created.is_empty());
        assert_eq!(
            std::fs::read_to_string(root.join(PROJECT_FILE)).unwrap(),
            before
        );
    }
}
