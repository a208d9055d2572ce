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
pub mod usage;
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

    /// The install folder of the toolchain `pins` names (installed or not).
    pub fn toolchain_folder(&self, pins: &ToolchainPins) -> Result<PathBuf> {
        Ok(self.toolchains().join(pins.install_name()?))
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
    /// When it was installed (its record was written), seconds since the Unix epoch.
    pub installed_at: u64,
    /// The projects that used it, latest first.
    pub uses: Vec<usage::Use>,
}

impl Installed {
    /// What was installed beside a known release's wheels (`[toolchain] components`);
    /// for a library, its pin.
    pub fn components(&self) -> Vec<String> {
        let base: &[&str] = match sets::known(&self.record.name) {
            Some(known) if self.record.kind == "toolchain" => known.wheels,
            _ => &[],
        };
        self.record
            .requirements
            .iter()
            .filter(|r| !base.contains(&r.as_str()))
            .cloned()
            .collect()
    }

    /// The latest time anything used it: its last recorded use, else its install.
    pub fn last_used(&self) -> u64 {
        self.uses
            .iter()
            .map(|u| u.at)
            .max()
            .unwrap_or(0)
            .max(self.installed_at)
    }
}

/// A toolchain install's folder name: the release and a hash of the machine and the
/// wheels (sorted).
fn toolchain_install_name(release: &str, requirements: &[String]) -> Result<String> {
    let mut p = Preimage::default();
    p.push("machine", index::machine_tag()?);
    for r in requirements {
        p.push("wheel", r.clone());
    }
    Ok(format!(
        "{release}-{}",
        &p.digest("kart-toolchain-v1")[..16]
    ))
}

/// The record of the install `folder`: its name and `.json`, beside it.
fn record_path(folder: &Path) -> PathBuf {
    let mut name = folder.file_name().unwrap_or_default().to_os_string();
    name.push(".json");
    folder.with_file_name(name)
}

fn read_record(folder: &Path) -> Option<InstallRecord> {
    let parse = |path: &Path| {
        let text = kart_runtime::text::read_text(path, kart_runtime::text::Limit::CACHE).ok()?;
        let record: InstallRecord = serde_json::from_str(&text).ok()?;
        (record.format == RECORD_FORMAT && folder.is_dir()).then_some(record)
    };
    if let Some(record) = parse(&record_path(folder)) {
        return Some(record);
    }
    // Earlier versions named a toolchain's record by its name less what follows the last dot
    // (`13.json` for `13.0-…`), one file for every install of a release: taken only
    // when it describes this very folder, and moved to its own name.
    let legacy = folder.with_extension("json");
    let record = parse(&legacy)?;
    let name = folder.file_name()?.to_str()?;
    let mine = record.kind == "toolchain"
        && toolchain_install_name(&record.name, &record.requirements).ok()? == name;
    if !mine {
        return None;
    }
    if let Ok(json) = serde_json::to_string_pretty(&record) {
        let _ = write_atomic(&record_path(folder), json.as_bytes());
    }
    Some(record)
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

/// Every finished install in the home, toolchains first, with the projects that used
/// each.
pub fn list(home: &Home) -> Vec<Installed> {
    let uses = usage::all(&home.root);
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
                let installed_at = std::fs::metadata(record_path(&path))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let key = usage::install_key(&home.root, &path);
                let mut used: Vec<usage::Use> = uses
                    .iter()
                    .filter(|u| key.as_deref() == Some(u.install.as_str()))
                    .cloned()
                    .collect();
                used.sort_by(|a, b| b.at.cmp(&a.at).then(a.project.cmp(&b.project)));
                Some(Installed {
                    path,
                    record,
                    bytes,
                    installed_at,
                    uses: used,
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

/// Which installs a gc removes.
#[derive(Clone, Debug)]
pub struct GcPolicy {
    /// Installs never removed: the current project's.
    pub keep: Vec<PathBuf>,
    /// Installs removed whenever they were last used (folder names or paths).
    pub named: Vec<String>,
    /// Installs no project used for this long (seconds) are removed.
    pub unused_for: u64,
}

/// One install a gc looked at: whether it goes, and why.
#[derive(Clone, Debug, Serialize)]
pub struct GcDecision {
    /// The install.
    pub install: Installed,
    /// Whether it is (or would be) removed.
    pub remove: bool,
    /// Why, in words.
    pub why: String,
}

/// `3 days`, `5 hours`, `12 minutes`, `40 seconds`.
pub fn ago(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s >= 2 * 86_400 => (s / 86_400, "days"),
        s if s >= 2 * 3600 => (s / 3600, "hours"),
        s if s >= 2 * 60 => (s / 60, "minutes"),
        s => (s, "seconds"),
    };
    format!("{n} {unit} ago")
}

fn last_use_words(installed: &Installed, now: u64) -> String {
    match installed.uses.first() {
        Some(u) => format!(
            "last used {} by {}",
            ago(now.saturating_sub(u.at)),
            crate::untrusted::for_terminal(&u.project.display().to_string())
        ),
        None => format!(
            "installed {} and used by no project since",
            ago(now.saturating_sub(installed.installed_at))
        ),
    }
}

/// What a gc under `policy` removes and keeps, install by install. A name in
/// `policy.named` that is no install is an error.
pub fn plan_gc(home: &Home, policy: &GcPolicy) -> Result<Vec<GcDecision>> {
    let installed = list(home);
    let now = usage::now();
    let names = |i: &Installed| {
        let file = i.path.file_name().map(|n| n.to_string_lossy().into_owned());
        let path = i.path.display().to_string();
        move |n: &String| Some(n) == file.as_ref() || *n == path
    };
    for n in &policy.named {
        if !installed.iter().any(|i| names(i)(n)) {
            let known: Vec<String> = installed
                .iter()
                .filter_map(|i| i.path.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            return Err(Error::usage(
                format!(
                    "no install named `{}` in {}",
                    crate::untrusted::for_terminal(n),
                    home.root.display()
                ),
                Some(if known.is_empty() {
                    "nothing is installed there".to_string()
                } else {
                    format!("the installs are: {}", known.join(", "))
                }),
            ));
        }
    }
    Ok(installed
        .into_iter()
        .map(|install| {
            let named = policy.named.iter().any(names(&install));
            let idle = now.saturating_sub(install.last_used());
            let (remove, why) = if policy.keep.contains(&install.path) {
                (false, "this project pins it".to_string())
            } else if named {
                (true, "named".to_string())
            } else if idle >= policy.unused_for {
                (true, last_use_words(&install, now))
            } else {
                (false, last_use_words(&install, now))
            };
            GcDecision {
                install,
                remove,
                why,
            }
        })
        .collect())
}

/// Removes the installs `policy` names or finds unused, never `policy.keep`, and
/// leftovers of unfinished installs. Returns every decision, removed ones marked.
pub fn gc(home: &Home, policy: &GcPolicy) -> Result<Vec<GcDecision>> {
    let _lock = home.lock(Duration::from_secs(60))?;
    let decisions = plan_gc(home, policy)?;
    for d in decisions.iter().filter(|d| d.remove) {
        let path = &d.install.path;
        let _ = std::fs::remove_file(record_path(path));
        std::fs::remove_dir_all(path).at("remove", path)?;
    }
    let kept: Vec<String> = decisions
        .iter()
        .filter(|d| !d.remove)
        .filter_map(|d| usage::install_key(&home.root, &d.install.path))
        .collect();
    // Uses of removed installs, and unreadable use files, go too.
    usage::prune(&home.root, |u| kept.contains(&u.install))?;
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
    Ok(decisions)
}
