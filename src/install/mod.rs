//! `kart toolchain`: kart installs what `kart.toml` pins — the nvcc release (a set of
//! PyPI wheels known to work together, [`sets`]), `[toolchain] components` beside it,
//! and `[library.*]` header libraries — into a per-user folder shared by every project
//! ([`Home`]: `KART_HOME`, else `$XDG_CACHE_HOME/kart`, else `~/.cache/kart`).
//!
//! An install is a folder named by what it holds (the release, the exact wheels, the
//! machine), so two projects pinning the same set share one, and changing a pin makes
//! another. Each wheel is checked against its sha256 (kart's own pin for a known
//! release, else the index's) before it is unpacked; the folder is renamed into place
//! whole and its record written last, so an interrupted install leaves nothing a build
//! would use. One install at a time per home (a file lock); builds only read.

pub mod index;
pub mod sets;
pub mod wheel;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::digest::{Preimage, sha256_hex};
use crate::error::{Error, IoContext, Result};
use crate::project::library::{Library, LibrarySource, parse_pin};
use crate::store::fsutil::{TEMP_PREFIX, write_atomic};
use index::{Index, WheelFile};

/// The record of a finished install, beside its folder.
pub const RECORD_FORMAT: u32 = 1;

/// The per-user folder installs live in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// Its root.
    pub root: PathBuf,
}

impl Home {
    /// `KART_HOME`, else `$XDG_CACHE_HOME/kart`, else `$HOME/.cache/kart`.
    pub fn from_env() -> Result<Home> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let root = if let Some(home) = var("KART_HOME") {
            PathBuf::from(home)
        } else if let Some(cache) = var("XDG_CACHE_HOME") {
            PathBuf::from(cache).join("kart")
        } else if let Some(home) = var("HOME") {
            PathBuf::from(home).join(".cache/kart")
        } else {
            return Err(Error::environment(
                "no folder for kart's installs: KART_HOME, XDG_CACHE_HOME and HOME are unset",
                "set KART_HOME to a folder kart may write to",
            ));
        };
        Ok(Home { root })
    }

    fn toolchains(&self) -> PathBuf {
        self.root.join("toolchains")
    }

    fn libraries(&self) -> PathBuf {
        self.root.join("libraries")
    }

    /// Holds the home for an install or a gc: one at a time, waiting up to `timeout`.
    fn lock(&self, timeout: Duration) -> Result<std::fs::File> {
        std::fs::create_dir_all(&self.root).at("create", &self.root)?;
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .at("open", &path)?;
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::StoreBusy { path });
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).at("lock", &path);
                }
            }
        }
    }
}

/// What a project pins: an nvcc release and the components beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainPins {
    /// `13.0`.
    pub release: String,
    /// `[toolchain] components`, `name==version`.
    pub components: Vec<String>,
}

impl ToolchainPins {
    /// What `project`'s kart.toml pins, if it pins an nvcc release.
    pub fn of(project: &crate::project::Project) -> Option<ToolchainPins> {
        Some(ToolchainPins {
            release: project.nvcc_release.clone()?,
            components: project.components.clone(),
        })
    }

    /// The known release, or an error listing the ones kart installs.
    pub fn known(&self) -> Result<&'static sets::KnownRelease> {
        sets::known(&self.release).ok_or_else(|| {
            let known: Vec<&str> = sets::KNOWN_RELEASES.iter().map(|r| r.release).collect();
            Error::environment(
                format!(
                    "kart does not install nvcc {} (it installs {})",
                    self.release,
                    known.join(", ")
                ),
                "pin one of those in kart.toml ([toolchain] nvcc), or install that release yourself and pass --nvcc",
            )
        })
    }

    /// Every wheel, sorted.
    pub fn requirements(&self) -> Result<Vec<String>> {
        let mut all: Vec<String> = self.known()?.wheels.iter().map(|w| w.to_string()).collect();
        all.extend(self.components.iter().cloned());
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// The install's folder name: the release and a hash of the wheels and the machine.
    pub fn install_name(&self) -> Result<String> {
        let mut p = Preimage::default();
        p.push("machine", index::machine_tag()?);
        for r in self.requirements()? {
            p.push("wheel", r);
        }
        Ok(format!(
            "{}-{}",
            self.release,
            &p.digest("kart-toolchain-v1")[..16]
        ))
    }
}

/// The record written last into a finished install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// `toolchain` or `library`.
    pub kind: String,
    /// The release (a toolchain) or the library's name.
    pub name: String,
    /// The pins installed.
    pub requirements: Vec<String>,
    /// Each wheel's file name and sha256.
    pub wheels: Vec<(String, String)>,
    /// Files unpacked.
    pub files: usize,
    /// `kart 0.1.0`.
    pub installed_by: String,
}

/// An install found in the home.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// Its folder.
    pub path: PathBuf,
    /// Its record.
    pub record: InstallRecord,
    /// Bytes on disk.
    pub bytes: u64,
}

fn record_path(folder: &Path) -> PathBuf {
    folder.with_extension("json")
}

fn read_record(folder: &Path) -> Option<InstallRecord> {
    let text =
        kart_runtime::text::read_text(&record_path(folder), kart_runtime::text::Limit::CACHE)
            .ok()?;
    let record: InstallRecord = serde_json::from_str(&text).ok()?;
    (record.format == RECORD_FORMAT && folder.is_dir()).then_some(record)
}

/// nvcc of the installed toolchain `pins` names, if it is installed.
pub fn installed_nvcc(home: &Home, pins: &ToolchainPins) -> Option<PathBuf> {
    let folder = home.toolchains().join(pins.install_name().ok()?);
    read_record(&folder)?;
    let nvcc = folder.join(pins.known().ok()?.nvcc);
    nvcc.is_file().then_some(nvcc)
}

/// Where a pip header library is installed: its folder, named by the pin and machine.
fn library_folder(home: &Home, library: &Library) -> Option<PathBuf> {
    let LibrarySource::Pip(spec) = &library.source else {
        return None;
    };
    let digest = sha256_hex(format!("kart-library-v1\n{spec}").as_bytes());
    Some(
        home.libraries()
            .join(format!("{}-{}", library.name, &digest[..16])),
    )
}

/// The installed folder of a pip header library, if it is installed.
pub fn installed_library(home: &Home, library: &Library) -> Option<PathBuf> {
    let folder = library_folder(home, library)?;
    read_record(&folder).map(|_| folder)
}

/// What an install did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InstallReport {
    /// (what, folder) installed now.
    pub installed: Vec<(String, PathBuf)>,
    /// (what, folder) already there.
    pub present: Vec<(String, PathBuf)>,
    /// Bytes downloaded.
    pub downloaded: u64,
}

/// Shown while installing: one wheel at a time.
pub trait InstallProgress: Sync {
    /// A download of `total` bytes (when known) starts.
    fn start(&self, wheel: &str, total: Option<u64>);
    /// Bytes so far.
    fn advance(&self, done: u64);
    /// The wheel is downloaded and checked.
    fn finish(&self, wheel: &str);
}

/// Installs the toolchain `pins` names and the pip libraries among `libraries`, each
/// only if it is not installed yet.
pub fn install(
    home: &Home,
    pins: Option<&ToolchainPins>,
    libraries: &[&Library],
    progress: &dyn InstallProgress,
) -> Result<InstallReport> {
    let _lock = home.lock(Duration::from_secs(30 * 60))?;
    let mut report = InstallReport::default();
    let mut index = None;
    if let Some(pins) = pins {
        let folder = home.toolchains().join(pins.install_name()?);
        let what = format!("nvcc {}", pins.release);
        if read_record(&folder).is_some() {
            report.present.push((what, folder));
        } else {
            let known = pins.known()?;
            let index = open_index(&mut index)?;
            let mut wheels = Vec::new();
            for requirement in pins.requirements()? {
                let (name, version) = split_pin(&requirement)?;
                let mut wheel = index.find_wheel(name, version)?;
                if let Some(pinned) = sets::pinned_sha256(&wheel.filename) {
                    // A known release's wheels are checked against kart's own pins,
                    // not only the index's word.
                    wheel.sha256 = pinned.to_string();
                } else if known.wheels.contains(&requirement.as_str()) {
                    return Err(Error::environment(
                        format!("kart has no sha256 pinned for `{}`", wheel.filename),
                        "this machine's platform is not one kart's pins cover",
                    ));
                }
                wheels.push(wheel);
            }
            unpack_all(
                home,
                index,
                &folder,
                ("toolchain", &pins.release),
                pins.requirements()?,
                &wheels,
                progress,
                &mut report,
            )?;
            let nvcc = folder.join(known.nvcc);
            if !nvcc.is_file() {
                return Err(Error::environment(
                    format!("the installed wheels hold no `{}`", known.nvcc),
                    "report this: the release's wheel set is broken",
                ));
            }
            report.installed.push((what, folder));
        }
    }
    for library in libraries {
        let Some(folder) = library_folder(home, library) else {
            continue;
        };
        let LibrarySource::Pip(spec) = &library.source else {
            continue;
        };
        let what = format!("library {} ({spec})", library.name);
        if read_record(&folder).is_some() {
            report.present.push((what, folder));
            continue;
        }
        let index = open_index(&mut index)?;
        let (name, version) = split_pin(spec)?;
        let wheel = index.find_wheel(name, version)?;
        unpack_all(
            home,
            index,
            &folder,
            ("library", &library.name),
            vec![spec.clone()],
            &[wheel],
            progress,
            &mut report,
        )?;
        report.installed.push((what, folder));
    }
    Ok(report)
}

fn open_index(slot: &mut Option<Index>) -> Result<&Index> {
    if slot.is_none() {
        *slot = Some(Index::from_env()?);
    }
    Ok(slot.as_ref().expect("just set"))
}

fn split_pin(spec: &str) -> Result<(&str, &str)> {
    parse_pin(spec).ok_or_else(|| {
        Error::usage(
            format!("`{spec}` is not pinned as NAME==VERSION"),
            Some("pin the exact package in kart.toml".into()),
        )
    })
}

/// Downloads and checks every wheel, unpacks them into a temporary folder beside
/// `folder`, renames it into place and writes the record.
#[allow(clippy::too_many_arguments)]
fn unpack_all(
    home: &Home,
    index: &Index,
    folder: &Path,
    (kind, name): (&str, &str),
    requirements: Vec<String>,
    wheels: &[WheelFile],
    progress: &dyn InstallProgress,
    report: &mut InstallReport,
) -> Result<InstallRecord> {
    let parent = folder.parent().unwrap_or(&home.root);
    std::fs::create_dir_all(parent).at("create", parent)?;
    crate::store::fsutil::sweep_temp_files_shallow(parent);
    let staging = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir_in(parent)
        .at("create a temporary folder in", parent)?;
    let downloads = home.root.join("downloads");
    // A download a killed install left behind (the home's lock is held here).
    crate::store::fsutil::sweep_temp_files_shallow(&downloads);
    let mut files = 0;
    for wheel in wheels {
        let file = downloads.join(format!("{}.whl", wheel.sha256));
        if !file.is_file() {
            progress.start(&wheel.filename, wheel.size);
            index.download(wheel, &file, &|done| progress.advance(done))?;
            progress.finish(&wheel.filename);
            report.downloaded += std::fs::metadata(&file).map_or(0, |m| m.len());
        }
        files += wheel::unpack(&file, staging.path())?;
        // The wheel is unpacked; its bytes are not needed again.
        let _ = std::fs::remove_file(&file);
    }
    let _ = std::fs::remove_dir_all(folder);
    let staged = staging.keep();
    std::fs::rename(&staged, folder).at("rename into place", folder)?;
    let record = InstallRecord {
        format: RECORD_FORMAT,
        kind: kind.to_string(),
        name: name.to_string(),
        requirements,
        wheels: wheels
            .iter()
            .map(|w| (w.filename.clone(), w.sha256.clone()))
            .collect(),
        files,
        installed_by: concat!("kart ", env!("CARGO_PKG_VERSION")).to_string(),
    };
    let text = serde_json::to_string_pretty(&record).unwrap_or_default();
    write_atomic(&record_path(folder), text.as_bytes())?;
    Ok(record)
}

/// Every finished install in the home, toolchains first.
pub fn list(home: &Home) -> Vec<Installed> {
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
                let bytes = folder_bytes(&path);
                Some(Installed {
                    path,
                    record,
                    bytes,
                })
            })
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        out.extend(found);
    }
    out
}

fn folder_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(|e| e.ok()) {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Removes every install but `keep` (folders), and unfinished ones. Returns what it
/// removed.
pub fn gc(home: &Home, keep: &[PathBuf]) -> Result<Vec<Installed>> {
    let _lock = home.lock(Duration::from_secs(60))?;
    let mut removed = Vec::new();
    for installed in list(home) {
        if keep.contains(&installed.path) {
            continue;
        }
        let _ = std::fs::remove_file(record_path(&installed.path));
        std::fs::remove_dir_all(&installed.path).at("remove", &installed.path)?;
        removed.push(installed);
    }
    for dir in [
        home.toolchains(),
        home.libraries(),
        home.root.join("downloads"),
    ] {
        crate::store::fsutil::sweep_temp_files_shallow(&dir);
        // Folders without a record are installs that never finished.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.filter_map(|e| e.ok()) {
                let p = e.path();
                if p.is_dir() && read_record(&p).is_none() {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
    }
    Ok(removed)
}
