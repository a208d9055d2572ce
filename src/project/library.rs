//! Header libraries as `kart.toml` declares them (`[library.NAME]`): a pinned pip
//! package or a folder of the project. Installing and hashing them is the build's
//! (`build::library`).

use std::path::PathBuf;

/// Where a project may keep a pip library itself (`.toolchain/lib/NAME`), relative to
/// the project root; else `kart toolchain install` puts it in kart's home.
pub const LIBRARY_PREFIX: &str = ".toolchain/lib";

/// A header library declared in `kart.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    /// Its name (`cutlass`), what kernels list in `libraries`.
    pub name: String,
    /// Where it comes from: a pinned pip package or a folder of the project.
    pub source: LibrarySource,
    /// The folder passed to nvcc with `-I`, relative to the project root.
    pub include: PathBuf,
    /// The declared sha256 of the include folder's content.
    pub sha256: Option<String>,
}

/// Where a library's headers come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibrarySource {
    /// `pip = "nvidia-cutlass==4.2.0.0"`, installed under `.toolchain/lib/NAME`.
    Pip(String),
    /// `path = "third_party/cutlass/include"`: vendored in the project.
    Path,
}

impl Library {
    /// What the key records besides the content: the pip pin, or `vendored`.
    pub fn version(&self) -> String {
        match &self.source {
            LibrarySource::Pip(spec) => spec.clone(),
            LibrarySource::Path => "vendored".to_string(),
        }
    }
}

/// `name==version`: a pinned pip requirement.
pub fn parse_pin(spec: &str) -> Option<(&str, &str)> {
    let (name, version) = spec.split_once("==")?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(name) && ok(version)).then_some((name, version))
}
