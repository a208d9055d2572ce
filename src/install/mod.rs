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
//!
//! Installs of one home share what they can ([`shared`]): each wheel is downloaded
//! once into the home's wheel cache, and each file is stored once, read-only, with
//! every install holding a hard link to it; [`inventory`] lists the installs and
//! removes what no project uses.

pub mod home;
pub mod index;
pub mod inventory;
pub mod record;
pub mod sets;
pub mod shared;
pub mod usage;
pub mod wheel;

pub use home::Home;
pub use inventory::{GcDecision, GcOutcome, GcPolicy, ago, gc, list, plan, plan_gc};
pub use record::{InstallRecord, Installed, RECORD_FORMAT};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::digest::sha256_hex;
use crate::error::{Error, IoContext, Result};
use crate::project::library::{Library, LibrarySource, parse_pin};
use crate::store::fsutil::{TEMP_PREFIX, write_atomic};
use index::{Index, WheelFile};
use record::{read_record, record_path, toolchain_install_name};

impl Home {
    /// The install folder of the toolchain `pins` names (installed or not).
    pub fn toolchain_folder(&self, pins: &ToolchainPins) -> Result<PathBuf> {
        Ok(self.toolchains().join(pins.install_name()?))
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
        toolchain_install_name(&self.release, &self.requirements()?)
    }
}

/// `with no components`, `with components a==1, b==2`: what tells one install of a
/// release from another, for messages.
pub fn describe_components(components: &[String]) -> String {
    if components.is_empty() {
        "with no components".to_string()
    } else {
        format!("with components {}", components.join(", "))
    }
}

/// The error for a toolchain kart.toml pins that is not installed: the release and
/// components it pins, and the installs of that release the home has instead.
pub fn not_installed(home: &Home, pins: &ToolchainPins) -> Error {
    let others: Vec<String> = list(home)
        .iter()
        .filter(|i| i.record.kind == "toolchain" && i.record.name == pins.release)
        .map(|i| describe_components(&i.components()))
        .collect();
    let mut message = format!(
        "nvcc {} {} is not installed in {}",
        pins.release,
        describe_components(&pins.components),
        home.root.display()
    );
    if !others.is_empty() {
        message.push_str(&format!(
            " (it has nvcc {} {}: kart.toml's [toolchain] components differ)",
            pins.release,
            others.join("; and ")
        ));
    }
    Error::environment(
        message,
        "run `kart toolchain install`: it installs the nvcc release and components kart.toml pins",
    )
}

/// Records that the project at `project_root` uses the install `folder` now; a
/// failure to record is ignored (it must never fail a build).
pub fn record_use(home: &Home, folder: &Path, project_root: &Path) {
    let _ = usage::record(&home.root, folder, project_root);
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
    /// Bytes of wheels taken from the home's wheel cache (hashed again, not
    /// downloaded).
    pub cached: u64,
    /// The files placed: new to the home, or shared with other installs.
    pub sharing: shared::Sharing,
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

/// Takes every wheel from the home's wheel cache (hashed again) or downloads it there
/// (checked), unpacks them in order into a temporary folder beside `folder` through the
/// home's shared files, syncs it, renames it into place and writes the record.
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
    sweep_unfinished(parent);
    let staging = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir_in(parent)
        .at("create a temporary folder in", parent)?;
    let mut store = shared::FileStore::open(&home.root)?;
    let mut files = 0;
    for wheel in wheels {
        let file = shared::wheel_path(&home.root, &wheel.sha256);
        if shared::cached_wheel_ok(&file, &wheel.sha256) {
            report.cached += std::fs::metadata(&file).map_or(0, |m| m.len());
        } else {
            // A download a killed install left behind (the home's lock is held here).
            if let Some(cache) = file.parent() {
                crate::store::fsutil::sweep_temp_files_shallow(cache);
            }
            progress.start(&wheel.filename, wheel.size);
            index.download(wheel, &file, &|done| progress.advance(done))?;
            progress.finish(&wheel.filename);
            shared::seal_wheel(&file)?;
            report.downloaded += std::fs::metadata(&file).map_or(0, |m| m.len());
        }
        files += wheel::unpack(&file, staging.path(), &mut store)?;
    }
    store.sync();
    shared::sync_tree(staging.path());
    crate::failpoint::hit("install.before-rename", name);
    let _ = std::fs::remove_dir_all(folder);
    let staged = staging.keep();
    std::fs::rename(&staged, folder).at("rename into place", folder)?;
    crate::store::fsutil::sync_dir(parent);
    report.sharing.files += store.sharing.files;
    report.sharing.new_bytes += store.sharing.new_bytes;
    report.sharing.shared_bytes += store.sharing.shared_bytes;
    report.sharing.copied += store.sharing.copied;
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

/// Removes the temporary folders (and files) of installs that never finished in
/// `dir`: their links would keep shared files alive. Only under the home's lock.
fn sweep_unfinished(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            let path = e.path();
            let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}
