//! Finding nvcc, checking its release, and fingerprinting the toolkit files that shape
//! device code.
//!
//! The fingerprint is part of every action key. Hashing a toolkit takes a fifth of a
//! second to a second, so it is cached once per machine in kart's home ([`stamp`]),
//! keyed by the stamps (size, mtime, ctime, inode) of each hashed file and of every
//! folder under `include/` (a reinstalled header wheel replaces files, which changes
//! its folders' stamps). A cache hit runs no process at all: a no-op build must not pay
//! for `nvcc --version`, nor a build into a fresh store for hashing the toolkit.
//! [`library`] pins the header libraries a project names to their installed copies;
//! [`headers`] names the component wheel of a missing toolkit header.

pub mod headers;
pub mod library;
pub mod stamp;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::digest::{Preimage, sha256_file, sha256_hex};
use crate::error::{Error, IoContext, Result};
use crate::tree::hash_tree;
use stamp::{CacheDirs, Stamp};

/// The command that installs the pinned toolchain into the project.
pub const SETUP_HINT: &str = "run `kart toolchain install`: it installs the nvcc kart.toml pins";

/// Environment variables that change what nvcc does behind the key's back.
pub const REFUSED_ENV: [&str; 3] = ["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"];

/// Bump when the cache file's fields or meaning change. 2: stamps with ctime, inode
/// and device; the cache in kart's home.
const FINGERPRINT_CACHE_VERSION: u32 = 2;

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

    /// Fingerprints the nvcc at `nvcc` (absolute), using `cache` to skip the work when
    /// nothing changed since last time.
    pub fn load(nvcc: &Path, cache: &CacheDirs) -> Result<Toolchain> {
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
        let cache_file = format!(
            "{}.json",
            &sha256_hex(nvcc.as_os_str().as_encoded_bytes())[..24]
        );
        let hit = cache.read::<CachedToolchain>(&cache_file, |cached| {
            cached.version == FINGERPRINT_CACHE_VERSION
                && cached.stamps == stamps
                && cached.toolchain.nvcc == nvcc
                && cached.toolchain.root == root
                && cached.toolchain.is_consistent()
        });
        if let Some(cached) = hit {
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
        let fingerprint = fingerprint_of(&version_text, &components);
        let toolchain = Toolchain {
            nvcc: nvcc.to_path_buf(),
            root,
            version_text,
            release,
            fingerprint,
            components,
            gpu_codes,
            packages: Vec::new(),
            libraries: Default::default(),
            unavailable_libraries: Default::default(),
        };
        let cached = CachedToolchain {
            version: FINGERPRINT_CACHE_VERSION,
            stamps,
            toolchain,
        };
        cache.write(&cache_file, &cached, &cached.stamps);
        Ok(cached.toolchain)
    }

    /// Whether a toolchain read back from a cache file agrees with itself: its
    /// fingerprint is the digest of its version text and components, its release the
    /// one of its version text. A file cut short or edited by hand is passed over.
    fn is_consistent(&self) -> bool {
        self.fingerprint == fingerprint_of(&self.version_text, &self.components)
            && parse_release(&self.version_text).as_deref() == Some(self.release.as_str())
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

/// sha256 over the version text and every component's hash.
fn fingerprint_of(version_text: &str, components: &Preimage) -> String {
    let mut fp = Preimage::default();
    fp.push("nvcc --version", version_text.to_string());
    fp.0.extend(components.0.iter().cloned());
    fp.digest("kart-toolchain-fingerprint-v1")
}

fn stamps(parts: &[(String, PathBuf)], include: &Path) -> Vec<Stamp> {
    let mut out: Vec<Stamp> = parts.iter().map(|(_, p)| Stamp::of(p, p.clone())).collect();
    let mut dirs = vec![include.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        out.push(Stamp::of(&dir, dir.clone()));
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

    /// A toolkit of links to the pinned one's files, but for its own `nvvm/libdevice`
    /// folder: a file of it can be replaced without touching the real install.
    fn linked_toolkit(dir: &Path) -> (PathBuf, PathBuf) {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let nvcc = std::fs::canonicalize(kart_testkit::pinned_nvcc(repo)).unwrap();
        let real = nvcc.parent().unwrap().parent().unwrap();
        for rel in ["bin/nvcc", "bin/nvcc.profile", "bin/cudafe++", "bin/ptxas"] {
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            std::os::unix::fs::symlink(real.join(rel), dir.join(rel)).unwrap();
        }
        std::fs::create_dir_all(dir.join("nvvm/bin")).unwrap();
        std::fs::create_dir_all(dir.join("nvvm/libdevice")).unwrap();
        for rel in ["nvvm/bin/cicc", "nvvm/libdevice/libdevice.10.bc"] {
            std::os::unix::fs::symlink(real.join(rel), dir.join(rel)).unwrap();
        }
        std::os::unix::fs::symlink(real.join("include"), dir.join("include")).unwrap();
        (
            dir.join("bin/nvcc"),
            real.join("nvvm/libdevice/libdevice.10.bc"),
        )
    }

    fn cache_file(dir: &Path) -> PathBuf {
        let files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }

    #[test]
    fn the_cached_fingerprint_follows_a_replaced_file_and_ignores_a_bad_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let (nvcc, real_libdevice) = linked_toolkit(&tmp.path().join("toolkit"));
        let cache_dir = tmp.path().join("cache");
        let cache = CacheDirs(vec![cache_dir.clone()]);
        let first = Toolchain::load(&nvcc, &cache).unwrap();
        assert!(first.gpu_codes.iter().any(|c| c == "sm_90"), "{first:?}");
        let file = cache_file(&cache_dir);
        let recorded = std::fs::read_to_string(&file).unwrap();

        // While the stamps match, the recorded answer is the answer (no nvcc runs).
        let mut doctored: serde_json::Value = serde_json::from_str(&recorded).unwrap();
        doctored["toolchain"]["gpu_codes"] = serde_json::json!(["sm_recorded"]);
        std::fs::write(&file, doctored.to_string()).unwrap();
        let hit = Toolchain::load(&nvcc, &cache).unwrap();
        assert_eq!(hit.gpu_codes, ["sm_recorded"]);
        assert_eq!(hit.fingerprint, first.fingerprint);

        // A file replaced by one of the same size and mtime (`rsync -t`, `cp -p`): only
        // its inode and ctime tell, and the fingerprint is computed again.
        let libdevice = nvcc
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("nvvm/libdevice/libdevice.10.bc");
        let mut bytes = std::fs::read(&real_libdevice).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let staged = libdevice.with_extension("new");
        std::fs::write(&staged, &bytes).unwrap();
        let mtime = std::fs::metadata(&real_libdevice)
            .unwrap()
            .modified()
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&staged)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::rename(&staged, &libdevice).unwrap();
        let replaced = Toolchain::load(&nvcc, &cache).unwrap();
        assert_ne!(replaced.fingerprint, first.fingerprint);
        assert_eq!(replaced.gpu_codes, first.gpu_codes);

        // Back to the first files: a cache file cut short, or one whose fingerprint is
        // not the digest of its own parts, is passed over, never used.
        std::fs::remove_file(&libdevice).unwrap();
        std::os::unix::fs::symlink(&real_libdevice, &libdevice).unwrap();
        std::fs::write(&file, &recorded[..recorded.len() / 2]).unwrap();
        let again = Toolchain::load(&nvcc, &cache).unwrap();
        assert_eq!(again.fingerprint, first.fingerprint);
        let mut forged: serde_json::Value = serde_json::from_str(&recorded).unwrap();
        forged["toolchain"]["fingerprint"] = serde_json::json!("0".repeat(64));
        forged["toolchain"]["gpu_codes"] = serde_json::json!(["sm_forged"]);
        std::fs::write(&file, forged.to_string()).unwrap();
        let again = Toolchain::load(&nvcc, &cache).unwrap();
        assert_eq!(again.fingerprint, first.fingerprint);
        assert_eq!(again.gpu_codes, first.gpu_codes);
    }

    #[test]
    fn reads_release() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_release(text).as_deref(), Some("13.0.88"));
        assert_eq!(parse_release("garbage"), None);
    }
}
