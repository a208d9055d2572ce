//! Finding nvcc, checking its release, and fingerprinting the toolkit files that shape
//! device code.
//!
//! The fingerprint is part of every action key. Hashing a toolkit takes about a second,
//! so it is cached per install, keyed by the size and mtime of each hashed file and of
//! every folder under `include/` (a reinstalled header wheel replaces files, which
//! changes its folders' mtimes). A cache hit runs no process at all: a no-op build
//! must not pay for `nvcc --version`. [`library`] pins the header libraries a project
//! names to their installed copies; [`headers`] names the component wheel of a missing
//! toolkit header.

pub mod headers;
pub mod library;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::digest::{Preimage, sha256_file, sha256_hex};
use crate::error::{Error, IoContext, Result};
use crate::store::fsutil::write_atomic;
use crate::tree::hash_tree;

/// The command that installs the pinned toolchain into the project.
pub const SETUP_HINT: &str = "run `kart toolchain install`: it installs the nvcc kart.toml pins";

/// Environment variables that change what nvcc does behind the key's back.
pub const REFUSED_ENV: [&str; 3] = ["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"];

/// Bump when the cache file's fields or meaning change.
const FINGERPRINT_CACHE_VERSION: u32 = 1;

/// A found, fingerprinted nvcc.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Toolchain {
    /// nvcc's absolute path.
    pub nvcc: PathBuf,
    /// The toolkit root (nvcc's `bin/..`).
    pub root: PathBuf,
    /// `nvcc --version`, verbatim.
    pub version_text: String,
    /// The full release, `13.0.88`.
    pub release: String,
    /// sha256 over the version text and every component's hash.
    pub fingerprint: String,
    /// (component, sha256) for each hashed part of the toolkit.
    pub components: Preimage,
    /// The real architectures nvcc can compile for (`--list-gpu-code`).
    pub gpu_codes: Vec<String>,
    /// The toolkit components `kart.toml` declares (`nvidia-curand==10.4.0.35`),
    /// checked as installed beside nvcc.
    #[serde(skip)]
    pub packages: Vec<String>,
    /// The header libraries of `kart.toml`, pinned.
    #[serde(skip)]
    pub libraries: std::collections::BTreeMap<String, crate::toolchain::library::LibraryPin>,
    /// The header libraries of `kart.toml` that could not be pinned (not installed, or
    /// their content changed), with the error's message and hint: a library is needed
    /// only by the kernels that list it, so this fails only their builds.
    #[serde(skip)]
    pub unavailable_libraries: std::collections::BTreeMap<String, (String, Option<String>)>,
}

/// Refuses environment variables that would silently change nvcc's output.
pub fn refuse_hostile_env() -> Result<()> {
    for name in REFUSED_ENV {
        if std::env::var_os(name).is_some_and(|v| !v.is_empty()) {
            return Err(Error::environment(
                format!(
                    "`{name}` is set: it changes what nvcc does without being part of the action key"
                ),
                format!("unset {name}; put flags in the kernel's `flags` instead"),
            ));
        }
    }
    Ok(())
}

/// Where nvcc is searched, first hit wins: `explicit` (`--nvcc`), `KART_NVCC`, the
/// project's `.toolchain/`, the install of the pinned release in kart's home
/// (`installed`, from `kart toolchain install`), `CUDA_HOME`/`CUDA_PATH`, then `PATH`.
pub fn find_nvcc(
    explicit: Option<&Path>,
    project_root: &Path,
    installed: Option<PathBuf>,
) -> Result<PathBuf> {
    let mut candidates: Vec<(String, PathBuf)> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(("--nvcc".into(), p.to_path_buf()));
    }
    if let Some(p) = std::env::var_os("KART_NVCC").filter(|v| !v.is_empty()) {
        candidates.push(("KART_NVCC".into(), PathBuf::from(p)));
    }
    for rel in [".toolchain/py/nvidia/cu13/bin/nvcc", ".toolchain/bin/nvcc"] {
        candidates.push((".toolchain".into(), project_root.join(rel)));
    }
    if let Some(nvcc) = installed {
        candidates.push(("kart's home".into(), nvcc));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            candidates.push((var.into(), PathBuf::from(p).join("bin/nvcc")));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            candidates.push(("PATH".into(), dir.join("nvcc")));
        }
    }
    for (i, (source, path)) in candidates.iter().enumerate() {
        if path.is_file() {
            return std::fs::canonicalize(path).at("resolve", path);
        }
        // An explicit choice that does not exist is a mistake, not a reason to look on.
        if i == 0 && (source == "--nvcc" || source == "KART_NVCC") {
            return Err(Error::environment(
                format!("nvcc not found at `{}` (from {source})", path.display()),
                "point it at an existing nvcc, or unset it to search .toolchain/, CUDA_HOME and PATH",
            ));
        }
    }
    Err(Error::environment(
        "nvcc not found (looked in --nvcc, KART_NVCC, .toolchain/, kart's home, CUDA_HOME, CUDA_PATH, PATH)",
        SETUP_HINT,
    ))
}

impl Toolchain {
    /// Fails, naming the library and what to do, if a kernel among `kernels` lists a
    /// header library that could not be pinned.
    pub fn require_libraries<'a>(
        &self,
        kernels: impl IntoIterator<Item = &'a crate::project::Kernel>,
    ) -> Result<()> {
        for kernel in kernels {
            for name in &kernel.libraries {
                if let Some((message, hint)) = self.unavailable_libraries.get(name) {
                    return Err(Error::Environment {
                        message: format!("kernel `{}` cannot build: {message}", kernel.name),
                        hint: hint.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Fingerprints the nvcc at `nvcc` (absolute), using `cache_dir` to skip the work
    /// when nothing changed since last time.
    pub fn load(nvcc: &Path, cache_dir: &Path) -> Result<Toolchain> {
        let root = nvcc
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| {
                Error::environment(
                    format!("`{}` is not inside a toolkit's bin folder", nvcc.display()),
                    SETUP_HINT,
                )
            })?
            .to_path_buf();
        let parts = components(&root, nvcc);
        let stamps = stamps(&parts, &root.join("include"));
        let cache_file = cache_dir.join(format!(
            "{}.json",
            &sha256_hex(nvcc.as_os_str().as_encoded_bytes())[..24]
        ));
        if let Ok(text) =
            kart_runtime::text::read_text(&cache_file, kart_runtime::text::Limit::CACHE)
            && let Ok(cached) = serde_json::from_str::<CachedToolchain>(&text)
            && cached.version == FINGERPRINT_CACHE_VERSION
            && cached.stamps == stamps
            && cached.toolchain.nvcc == nvcc
        {
            return Ok(cached.toolchain);
        }

        let version_text = run_nvcc(nvcc, &["--version"])?;
        let release = parse_release(&version_text).ok_or_else(|| {
            Error::environment(
                format!(
                    "cannot read the release from `{} --version`:\n{version_text}",
                    nvcc.display()
                ),
                SETUP_HINT,
            )
        })?;
        let gpu_codes = run_nvcc(nvcc, &["--list-gpu-code"])?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut components = Preimage::default();
        for (name, path) in &parts {
            let hash = if path.is_file() {
                sha256_file(path)?
            } else {
                "absent".to_string()
            };
            components.push(name.clone(), hash);
        }
        components.push("include/", hash_tree(&root.join("include"))?);
        let mut fp = Preimage::default();
        fp.push("nvcc --version", version_text.clone());
        fp.0.extend(components.0.iter().cloned());
        let toolchain = Toolchain {
            nvcc: nvcc.to_path_buf(),
            root,
            version_text,
            release,
            fingerprint: fp.digest("kart-toolchain-fingerprint-v1"),
            components,
            gpu_codes,
            packages: Vec::new(),
            libraries: Default::default(),
            unavailable_libraries: Default::default(),
        };
        let cached = CachedToolchain {
            version: FINGERPRINT_CACHE_VERSION,
            stamps,
            toolchain: toolchain.clone(),
        };
        // The cache is an optimisation: failing to write it must not fail the build.
        if std::fs::create_dir_all(cache_dir).is_ok()
            && let Ok(json) = serde_json::to_vec_pretty(&cached)
        {
            let _ = write_atomic(&cache_file, &json);
        }
        Ok(toolchain)
    }

    /// Refuses a release other than `required` (`13.0` matches `13.0.88`).
    pub fn check_release(&self, required: Option<&str>) -> Result<()> {
        let Some(required) = required else {
            return Ok(());
        };
        if self.release == required || self.release.starts_with(&format!("{required}.")) {
            return Ok(());
        }
        Err(Error::environment(
            format!(
                "nvcc at `{}` is release {}, but kart.toml requires {required}",
                self.nvcc.display(),
                self.release
            ),
            format!("{SETUP_HINT}, or point --nvcc / KART_NVCC at a {required} nvcc"),
        ))
    }

    /// Whether this nvcc can compile for `target` (by its base `sm_XX`).
    pub fn supports(&self, target: &crate::target::TargetArch) -> bool {
        self.gpu_codes.iter().any(|c| *c == target.base_name())
    }

    /// The host compiler's first `--version` line: provenance only, never in the key.
    pub fn host_compiler(&self) -> String {
        Command::new("gcc")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into())
    }
}

/// The files that shape device code, by stable name. nvcc drives the others; cudafe++
/// splits host from device code; cicc and libdevice make the PTX; ptxas the SASS.
fn components(root: &Path, nvcc: &Path) -> Vec<(String, PathBuf)> {
    let mut parts = vec![
        ("bin/nvcc".to_string(), nvcc.to_path_buf()),
        ("bin/nvcc.profile".into(), root.join("bin/nvcc.profile")),
        ("bin/cudafe++".into(), root.join("bin/cudafe++")),
        ("bin/ptxas".into(), root.join("bin/ptxas")),
        ("nvvm/bin/cicc".into(), root.join("nvvm/bin/cicc")),
    ];
    let libdevice = root.join("nvvm/libdevice");
    if let Ok(entries) = std::fs::read_dir(&libdevice) {
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            parts.push((format!("nvvm/libdevice/{n}"), libdevice.join(&n)));
        }
    }
    parts
}

#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
struct Stamp {
    path: PathBuf,
    size: u64,
    mtime_ns: u128,
}

fn stamp(path: &Path) -> Stamp {
    let (size, mtime_ns) = match std::fs::metadata(path) {
        Ok(m) => (
            m.len(),
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos()),
        ),
        Err(_) => (u64::MAX, 0),
    };
    Stamp {
        path: path.to_path_buf(),
        size,
        mtime_ns,
    }
}

fn stamps(parts: &[(String, PathBuf)], include: &Path) -> Vec<Stamp> {
    let mut out: Vec<Stamp> = parts.iter().map(|(_, p)| stamp(p)).collect();
    let mut dirs = vec![include.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        out.push(stamp(&dir));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut sub: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            sub.sort();
            dirs.extend(sub.into_iter().rev());
        }
    }
    out
}

#[derive(Serialize, Deserialize)]
struct CachedToolchain {
    version: u32,
    stamps: Vec<Stamp>,
    toolchain: Toolchain,
}

fn run_nvcc(nvcc: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(nvcc).args(args).output().at("run", nvcc)?;
    if !out.status.success() {
        return Err(Error::environment(
            format!(
                "`{} {}` failed ({}):\n{}",
                nvcc.display(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
            SETUP_HINT,
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `13.0.88` from nvcc's `--version` text (`…, V13.0.88`).
pub fn parse_release(version_text: &str) -> Option<String> {
    let line = version_text.lines().find(|l| l.contains("release"))?;
    let v = line.rsplit(", V").next()?.trim();
    let valid = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    valid.then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_release() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_release(text).as_deref(), Some("13.0.88"));
        assert_eq!(parse_release("garbage"), None);
    }
}
