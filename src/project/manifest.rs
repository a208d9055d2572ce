//! `kart.toml` and `kernels/<name>/kernel.toml`: parsing, validation and the param grid.
//!
//! Everything here is pure file reading: no toolchain, no store. Each error names the
//! file, line and column and what to write instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kart_runtime::error::{Error, IoContext, Result};
use kart_runtime::target::TargetArch;
use kart_runtime::text::{SourceFile, read_text};
use toml::Spanned;

use crate::project::kernel::Kernel;
use crate::project::kernel_toml::{KERNEL_FILE, load_kernel};
use crate::project::raw::{ManifestChecks, RawLibrary, RawProject, RawRemote, RawToolchain};
pub use kart_runtime::locate::PROJECT_FILE;

/// The remote cache, as `kart.toml` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteConfig {
    /// `http://…`, `https://…`, `file://…`, `s3://…`, `gs://…` or `az://…`.
    pub url: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never write to it.
    pub read_only: bool,
    /// An `s3://` remote's endpoint (`endpoint`), when it is not AWS itself.
    pub endpoint: Option<String>,
    /// An `s3://` remote's region (`region`).
    pub region: Option<String>,
    /// Read an object store with unsigned requests, and never write (`anonymous`).
    pub anonymous: bool,
    /// How long to wait for a connection (`connect_timeout`, seconds).
    pub connect_timeout: Option<std::time::Duration>,
    /// How long to wait for the first byte of an answer (`first_byte_timeout`).
    pub first_byte_timeout: Option<std::time::Duration>,
    /// How long a transfer may move less than 1 KiB before it counts as stalled
    /// (`stall_timeout`).
    pub stall_timeout: Option<std::time::Duration>,
    /// How long one request keeps retrying failures worth retrying (`give_up_after`).
    pub give_up_after: Option<std::time::Duration>,
    /// The slowest transfer rate a request's total deadline allows, bytes per second
    /// (`min_rate`, written in KiB/s).
    pub min_rate: Option<u64>,
    /// The most time one run spends on the remote (`budget`).
    pub budget: Option<std::time::Duration>,
}

/// The Remote Execution API server that compiles run on, as `kart.toml`'s `[executor]`
/// declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// `grpc://HOST:PORT/INSTANCE` (or `grpcs://` for TLS; the instance name is
    /// optional).
    pub url: String,
    /// Compiles sent at once (`jobs`): far more than the local cores, since they run on
    /// the cluster's workers.
    pub jobs: usize,
    /// How long to wait for one compile's result before compiling here (`timeout`,
    /// seconds); `None`: the compile's own timeout plus two minutes.
    pub timeout: Option<std::time::Duration>,
}

/// Compiles sent to an executor at once unless `[executor] jobs` says otherwise.
pub const DEFAULT_EXECUTOR_JOBS: usize = 64;

/// A parsed and validated project: `kart.toml` and every kernel under its kernels folder.
#[derive(Clone, Debug)]
pub struct Project {
    /// The folder holding `kart.toml` (absolute).
    pub root: PathBuf,
    /// The kernels folder, relative to the root.
    pub kernels_dir: PathBuf,
    /// The store folder (absolute).
    pub store_dir: PathBuf,
    /// Default targets.
    pub targets: Vec<TargetArch>,
    /// Required nvcc release (`13.0`), if any.
    pub nvcc_release: Option<String>,
    /// Toolkit components installed beside nvcc (`nvidia-curand==10.4.0.35`).
    pub components: Vec<String>,
    /// Header libraries (`[library.NAME]`), by name.
    pub libraries: BTreeMap<String, crate::project::library::Library>,
    /// The remote cache, if configured.
    pub remote: Option<RemoteConfig>,
    /// The remote executor, if configured.
    pub executor: Option<ExecutorConfig>,
    /// The GPUs of `[[fleet]]` (empty: none declared).
    pub fleet: Vec<crate::project::fleet::FleetGpu>,
    /// Kernels sorted by name.
    pub kernels: Vec<Kernel>,
    /// Kernels whose `kernel.toml` or sources could not be read: commands about other
    /// kernels go on without them, and their `kart.lock` records are kept as they are.
    pub broken: Vec<BrokenKernel>,
}

/// A kernel that could not be loaded, with why.
#[derive(Clone, Debug)]
pub struct BrokenKernel {
    /// The `name` its kernel.toml gives when that much can be read, else its folder's
    /// name.
    pub name: String,
    /// Its `kernel.toml`, relative to the project root.
    pub manifest: PathBuf,
    /// What is wrong, pointing at the line to fix.
    pub error: Error,
}

impl Project {
    /// Finds `kart.toml` in `start` or one of its parents and loads the project.
    pub fn discover(start: &Path) -> Result<Project> {
        Project::load(&kart_runtime::locate::find_root(start)?)
    }

    /// Loads the project whose `kart.toml` is in `root`.
    pub fn load(root: &Path) -> Result<Project> {
        let root = std::fs::canonicalize(root).at("resolve", root)?;
        let path = root.join(PROJECT_FILE);
        let text = read_text(&path, kart_runtime::text::Limit::MANIFEST)?;
        let file = SourceFile {
            path: PathBuf::from(PROJECT_FILE),
            text: &text,
        };
        let raw: RawProject = file.parse()?;

        let kernels_dir = match &raw.project.kernels {
            Some(k) => file.inside_root(&root, &root, k, "kernels folder")?,
            None => PathBuf::from("kernels"),
        };
        let store_dir = kart_runtime::locate::store_dir(
            &file,
            &root,
            raw.project.store.as_ref(),
            raw.project.store_outside_project,
        )?;
        let targets = file.targets(&raw.project.targets)?;
        if targets.is_empty() {
            return Err(file.error(
                raw.project.targets.span(),
                "`targets` is empty",
                "list at least one target, for example `targets = [\"sm_90\"]`",
            ));
        }
        let fleet = crate::project::fleet::fleet_from_raw(&file, &raw.fleet)?;
        let executor = match raw.executor {
            None => None,
            Some(e) => {
                let url = e.url.get_ref().trim().to_string();
                if !(url.starts_with("grpc://") || url.starts_with("grpcs://")) {
                    return Err(file.error(
                        e.url.span(),
                        format!("`[executor] url` must be a gRPC address, not `{url}`"),
                        "write `url = \"grpc://HOST:PORT\"` (or `grpcs://` for TLS, and `/INSTANCE` after the port for an instance name)",
                    ));
                }
                let jobs = match &e.jobs {
                    None => DEFAULT_EXECUTOR_JOBS,
                    Some(j) if (1..=4096).contains(j.get_ref()) => *j.get_ref() as usize,
                    Some(j) => {
                        return Err(file.error(
                            j.span(),
                            "`[executor] jobs` must be from 1 to 4096",
                            format!("for example `jobs = {DEFAULT_EXECUTOR_JOBS}`"),
                        ));
                    }
                };
                let timeout = match &e.timeout {
                    None => None,
                    Some(t) if *t.get_ref() > 0.0 && *t.get_ref() <= 86_400.0 => {
                        Some(Duration::from_secs_f64(*t.get_ref()))
                    }
                    Some(t) => {
                        return Err(file.error(
                            t.span(),
                            "`[executor] timeout` must be a number of seconds above 0 (and at most a day)",
                            "for example `timeout = 900`",
                        ));
                    }
                };
                Some(ExecutorConfig { url, jobs, timeout })
            }
        };
        let remote = match raw.remote {
            None => None,
            Some(r) => {
                let seconds = |v: &Option<Spanned<f64>>, name: &str| -> Result<Option<Duration>> {
                    let Some(v) = v else { return Ok(None) };
                    let secs = *v.get_ref();
                    if !(secs > 0.0 && secs <= 86_400.0) {
                        return Err(file.error(
                            v.span(),
                            format!(
                                "`{name}` must be a number of seconds above 0 (and at most a day)"
                            ),
                            format!("for example `{name} = 5`"),
                        ));
                    }
                    Ok(Some(Duration::from_secs_f64(secs)))
                };
                Some(RemoteConfig {
                    connect_timeout: seconds(&r.connect_timeout, "connect_timeout")?,
                    first_byte_timeout: seconds(&r.first_byte_timeout, "first_byte_timeout")?,
                    stall_timeout: seconds(&r.stall_timeout, "stall_timeout")?,
                    give_up_after: seconds(&r.give_up_after, "give_up_after")?,
                    budget: seconds(&r.budget, "budget")?,
                    min_rate: match &r.min_rate {
                        None => None,
                        Some(v) if *v.get_ref() >= 1.0 && *v.get_ref() <= 1e7 => {
                            Some((*v.get_ref() * 1024.0) as u64)
                        }
                        Some(v) => {
                            return Err(file.error(
                                v.span(),
                                "`min_rate` must be KiB per second, from 1 to 10000000",
                                "for example `min_rate = 1024` (1 MiB/s)",
                            ));
                        }
                    },
                    endpoint: remote_endpoint(&file, &r)?,
                    region: remote_region(&file, &r)?,
                    anonymous: remote_anonymous(&file, &r)?,
                    url: r.url.into_inner(),
                    trusted: r.trusted,
                    read_only: r.read_only,
                })
            }
        };
        let components = project_components(&file, raw.toolchain.as_ref())?;
        let libraries = project_libraries(&file, &root, &raw.library)?;
        let nvcc_release = raw.toolchain.and_then(|t| t.nvcc);

        let mut kernels: Vec<Kernel> = Vec::new();
        let mut broken = Vec::new();
        let abs_kernels = root.join(&kernels_dir);
        if abs_kernels.is_dir() {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&abs_kernels)
                .at("list", &abs_kernels)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join(KERNEL_FILE).is_file())
                .collect();
            dirs.sort();
            for dir in dirs {
                let rel = dir.strip_prefix(&root).unwrap_or(&dir).to_path_buf();
                match load_kernel(&root, &rel, &targets, &libraries) {
                    Ok(kernel) => kernels.push(kernel),
                    Err(error) => broken.push(BrokenKernel {
                        name: declared_name(&root, &rel),
                        manifest: rel.join(KERNEL_FILE),
                        error,
                    }),
                }
            }
        }
        kernels.sort_by(|a, b| a.name.cmp(&b.name));
        // A name used twice: the second kernel (in path order) is the broken one.
        let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut unique = Vec::with_capacity(kernels.len());
        let mut by_path: Vec<Kernel> = kernels;
        by_path.sort_by(|a, b| a.manifest.cmp(&b.manifest));
        for kernel in by_path {
            if let Some(first) = seen.get(&kernel.name) {
                broken.push(BrokenKernel {
                    name: kernel.name.clone(),
                    manifest: kernel.manifest.clone(),
                    error: Error::InvalidFile {
                        path: kernel.manifest.clone(),
                        line: 1,
                        column: 1,
                        message: format!(
                            "kernel name `{}` is also used by `{}`",
                            kernel.name,
                            first.display()
                        ),
                        hint: Some("give every kernel a unique `name`".into()),
                    },
                });
            } else {
                seen.insert(kernel.name.clone(), kernel.manifest.clone());
                unique.push(kernel);
            }
        }
        let mut kernels = unique;
        kernels.sort_by(|a, b| a.name.cmp(&b.name));
        // A variant that does not match its base (or whose base is broken) is broken.
        let failing: Vec<(usize, Error)> = kernels
            .iter()
            .enumerate()
            .filter_map(|(i, k)| check_variant(k, &kernels, &broken).err().map(|e| (i, e)))
            .collect();
        for (i, error) in failing.into_iter().rev() {
            let kernel = kernels.remove(i);
            broken.push(BrokenKernel {
                name: kernel.name,
                manifest: kernel.manifest,
                error,
            });
        }
        broken.sort_by(|a, b| a.manifest.cmp(&b.manifest));
        Ok(Project {
            root,
            kernels_dir,
            store_dir,
            targets,
            nvcc_release,
            components,
            libraries,
            remote,
            executor,
            fleet,
            kernels,
            broken,
        })
    }

    /// The broken kernel named `name` (by its `name`, or its folder's), if any.
    pub fn broken_kernel(&self, name: &str) -> Option<&BrokenKernel> {
        self.broken.iter().find(|b| {
            b.name == name
                || b.manifest
                    .parent()
                    .and_then(|d| d.file_name())
                    .is_some_and(|d| d == name)
        })
    }

    /// `name` and its variants (kernels whose `variant_of` names it), base first, the
    /// rest by name: the implementations `best()` and the tuner choose from. A
    /// variant's own name gives it alone.
    pub fn family(&self, name: &str) -> Result<Vec<&Kernel>> {
        let base = self.kernel(name)?;
        let mut family = vec![base];
        if base.variant_of.is_none() {
            family.extend(
                self.kernels
                    .iter()
                    .filter(|k| k.variant_of.as_ref().is_some_and(|v| v.base == name)),
            );
        }
        Ok(family)
    }

    /// The kernel named `name`, or a usage error listing the kernels that exist.
    pub fn kernel(&self, name: &str) -> Result<&Kernel> {
        if let Some(broken) = self.broken_kernel(name)
            && !self.kernels.iter().any(|k| k.name == name)
        {
            return Err(broken.error.clone());
        }
        self.kernels.iter().find(|k| k.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
            let listed = format!("kernels in this project: {}", names.join(", "));
            Error::usage(
                format!("no kernel named `{name}`"),
                Some(
                    match crate::suggest::did_you_mean(name, names.iter().copied()) {
                        Some(guess) => format!("{guess} ({listed})"),
                        None => listed,
                    },
                ),
            )
        })
    }
}

/// The scheme of a remote URL as written (`s3`), if it has one.
fn url_scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(scheme, _)| scheme)
}

/// `[remote] endpoint`: an http(s) URL, for an `s3://` remote only. Whether plain http
/// is allowed depends on the environment, so that is checked when the remote is opened.
fn remote_endpoint(file: &SourceFile<'_>, r: &RawRemote) -> Result<Option<String>> {
    let Some(e) = &r.endpoint else {
        return Ok(None);
    };
    if url_scheme(r.url.get_ref()) != "s3" {
        return Err(file.error(
            e.span(),
            "`endpoint` is a setting of s3:// remotes",
            "remove it, or make `url` an s3://bucket/prefix",
        ));
    }
    match reqwest::Url::parse(e.get_ref()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(Some(e.get_ref().clone()))
        }
        _ => Err(file.error(
            e.span(),
            format!("`endpoint` `{}` is not an http(s) URL", e.get_ref()),
            "for example `endpoint = \"https://minio.example:9000\"`",
        )),
    }
}

/// `[remote] region`: an AWS region name, for an `s3://` remote only.
fn remote_region(file: &SourceFile<'_>, r: &RawRemote) -> Result<Option<String>> {
    let Some(region) = &r.region else {
        return Ok(None);
    };
    let name = region.get_ref();
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if url_scheme(r.url.get_ref()) != "s3" || !plain {
        return Err(file.error(
            region.span(),
            if plain {
                "`region` is a setting of s3:// remotes".to_string()
            } else {
                format!("`region` `{name}` is not a region name")
            },
            "for example `region = \"eu-west-1\"`, with an s3://bucket/prefix `url`",
        ));
    }
    Ok(Some(name.clone()))
}

/// `[remote] anonymous`: for object stores only (`s3://`, `gs://`, `az://`).
fn remote_anonymous(file: &SourceFile<'_>, r: &RawRemote) -> Result<bool> {
    if r.anonymous && !matches!(url_scheme(r.url.get_ref()), "s3" | "gs" | "az") {
        return Err(file.error(
            r.url.span(),
            "`anonymous = true` is a setting of object-store remotes (s3://, gs://, az://)",
            "remove it: an HTTP remote reads without a token when KART_REMOTE_TOKEN is unset",
        ));
    }
    Ok(r.anonymous)
}

/// `[toolchain] components`: pinned pip requirements (`nvidia-curand==10.4.0.35`).
fn project_components(file: &SourceFile<'_>, raw: Option<&RawToolchain>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in raw.map(|t| t.components.as_slice()).unwrap_or_default() {
        if crate::project::library::parse_pin(c.get_ref()).is_none() {
            return Err(file.error(
                c.span(),
                format!("component `{}` is not pinned as NAME==VERSION", c.get_ref()),
                "pin the exact wheel, e.g. \"nvidia-curand==10.4.0.35\": it is part of every key",
            ));
        }
        out.push(c.get_ref().clone());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `[library.NAME]`: `pip` with `include` and `sha256`, or `path`.
fn project_libraries(
    file: &SourceFile<'_>,
    root: &Path,
    raw: &BTreeMap<Spanned<String>, Spanned<RawLibrary>>,
) -> Result<BTreeMap<String, crate::project::library::Library>> {
    use crate::project::library::{LIBRARY_PREFIX, Library, LibrarySource, parse_pin};
    let mut out = BTreeMap::new();
    for (name, lib) in raw {
        file.check_name(name.get_ref(), name.span(), "library")?;
        let span = lib.span();
        let lib = lib.get_ref();
        let (source, include) = match (&lib.pip, &lib.path) {
            (Some(pip), None) => {
                if parse_pin(pip.get_ref()).is_none() {
                    return Err(file.error(
                        pip.span(),
                        format!(
                            "`pip = \"{}\"` is not pinned as NAME==VERSION",
                            pip.get_ref()
                        ),
                        "pin the exact package, e.g. \"nvidia-cutlass==4.2.0.0\"",
                    ));
                }
                let Some(include) = &lib.include else {
                    return Err(file.error(
                        span,
                        format!(
                            "[library.{}] needs `include`: the headers' folder inside the package",
                            name.get_ref()
                        ),
                        "for nvidia-cutlass: include = \"cutlass_library/source/include\"",
                    ));
                };
                let base = root.join(LIBRARY_PREFIX).join(name.get_ref());
                let rel = file.inside_root(root, &base, include, "include folder")?;
                (LibrarySource::Pip(pip.get_ref().clone()), rel)
            }
            (None, Some(path)) => {
                if lib.include.is_some() {
                    return Err(file.error(
                        span,
                        "`include` goes with `pip`; with `path`, the path is the include folder",
                        "remove `include`, or point `path` at the folder nvcc should search",
                    ));
                }
                (
                    LibrarySource::Path,
                    file.inside_root(root, root, path, "library folder")?,
                )
            }
            _ => {
                return Err(file.error(
                    span,
                    format!("[library.{}] needs exactly one of `pip` and `path`", name.get_ref()),
                    "`pip = \"nvidia-cutlass==4.2.0.0\"` (installed by `kart toolchain install`) or `path = \"third_party/cutlass/include\"`",
                ));
            }
        };
        let sha256 = match &lib.sha256 {
            Some(s) if crate::digest::is_sha256_hex(s.get_ref()) => Some(s.get_ref().clone()),
            Some(s) => {
                return Err(file.error(
                    s.span(),
                    "`sha256` must be 64 lowercase hex digits",
                    "kart prints the content hash of the folder when it is missing",
                ));
            }
            None => None,
        };
        out.insert(
            name.get_ref().clone(),
            Library {
                name: name.get_ref().clone(),
                source,
                include,
                sha256,
            },
        );
    }
    Ok(out)
}

/// The `name` a kernel.toml that fails to load gives, if it is readable TOML with a
/// string `name` that is a C identifier; else its folder's name.
fn declared_name(root: &Path, dir: &Path) -> String {
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    read_text(
        &root.join(dir).join(KERNEL_FILE),
        kart_runtime::text::Limit::MANIFEST,
    )
    .ok()
    .and_then(|text| text.parse::<toml::Table>().ok())
    .and_then(|table| match table.get("name") {
        Some(toml::Value::String(name)) if kart_runtime::untrusted::is_c_identifier(name) => {
            Some(name.clone())
        }
        _ => None,
    })
    .unwrap_or(folder)
}

/// A `variant_of` names a kernel that is no variant itself, and the variant is called
/// as its base is: the same entries with the same call signatures, the same tuning
/// problem.
fn check_variant(k: &Kernel, kernels: &[Kernel], broken: &[BrokenKernel]) -> Result<()> {
    let Some(v) = &k.variant_of else {
        return Ok(());
    };
    let fail = |message: String, hint: String| Error::InvalidFile {
        path: k.manifest.clone(),
        line: v.line,
        column: v.column,
        message,
        hint: Some(hint),
    };
    let Some(base) = kernels.iter().find(|b| b.name == v.base) else {
        if let Some(b) = broken.iter().find(|b| b.name == v.base) {
            return Err(fail(
                format!(
                    "`variant_of` names `{}`, whose {} has an error",
                    v.base,
                    b.manifest.display()
                ),
                format!("fix `{}` first: {}", v.base, b.error),
            ));
        }
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        return Err(fail(
            format!(
                "`variant_of` names `{}`, which is not a kernel of this project",
                v.base
            ),
            format!("kernels: {}", names.join(", ")),
        ));
    };
    if base.name == k.name || base.variant_of.is_some() {
        return Err(fail(
            format!(
                "`variant_of` names `{}`, which is itself a variant (or this kernel)",
                v.base
            ),
            "name the base kernel: variants form one level".into(),
        ));
    }
    if base.entry != k.entry {
        return Err(fail(
                format!(
                    "a variant has its base's entries; `{}` has [{}], `{}` has [{}]",
                    base.name,
                    base.entry.join(", "),
                    k.name,
                    k.entry.join(", ")
                ),
                "give the variant's functions the base's names (a template entry is found by its template's name)".into(),
            ));
    }
    let call = |kernel: &Kernel, entry: &str| {
        kernel.signature.get(entry).map(|sig| {
            let args = kernel
                .launch
                .as_ref()
                .and_then(|l| l.args.get(entry))
                .map(Vec::as_slice);
            crate::call::call_signature(sig, args)
        })
    };
    for entry in &k.entry {
        let (theirs, ours) = (call(base, entry), call(k, entry));
        if theirs.is_none() || theirs != ours {
            let show = |c: Option<Vec<crate::signature::ParamKind>>| {
                c.map_or("no [signature]".into(), |c| {
                    format!(
                        "[{}]",
                        c.iter()
                            .map(|k| k.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            };
            return Err(fail(
                    format!(
                        "`{entry}` is called with {} in `{}` but {} in `{}`",
                        show(theirs),
                        base.name,
                        show(ours),
                        k.name
                    ),
                    "declare [signature] in both, and make the difference in [launch.args] (tensor maps from pointers, values from the problem)".into(),
                ));
        }
    }
    let problem = |kernel: &Kernel| {
        kernel.tune.as_ref().map(|t| {
            let exact: std::collections::BTreeSet<String> = t.exact.values().cloned().collect();
            (exact, t.nearest.clone())
        })
    };
    if problem(base) != problem(k) {
        return Err(fail(
            format!(
                "`{}` and its variant `{}` describe the tuning problem differently ([tune] exact keys and nearest)",
                base.name, k.name
            ),
            "use the same problem keys in both [tune] tables".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::kernel_toml::reserved_flag;
    use kart_runtime::model::{Config, ParamValue};
    use kart_runtime::untrusted::is_c_identifier;

    fn kernel(params: &[(&str, &[i64])], exclude: &[&[(&str, i64)]]) -> Kernel {
        Kernel {
            name: "k".into(),
            dir: "kernels/k".into(),
            manifest: "kernels/k/kernel.toml".into(),
            sources: vec![],
            include: vec![],
            entry: vec!["k".into()],
            templates: Default::default(),
            param_macros: Default::default(),
            libraries: Vec::new(),
            targets: vec![],
            flags: vec![],
            defines: BTreeMap::new(),
            defined: Default::default(),
            define_params: Default::default(),
            prelude: None,
            ptx: false,
            params: params
                .iter()
                .map(|(n, vs)| {
                    (
                        n.to_string(),
                        vs.iter().map(|v| ParamValue::Int(*v)).collect(),
                    )
                })
                .collect(),
            exclude: exclude
                .iter()
                .map(|e| {
                    e.iter()
                        .map(|(n, v)| (n.to_string(), ParamValue::Int(*v)))
                        .collect()
                })
                .collect(),
            signature: Default::default(),
            default: None,
            tune: None,
            require: Vec::new(),
            derived: Vec::new(),
            launch: None,
            variant_of: None,
            declared_in_source: Default::default(),
            unmentioned: Default::default(),
            problem_params: Default::default(),
            problem_combos: Default::default(),
            launch_params: Default::default(),
            launch_params_found: Default::default(),
            prune: None,
            kept: Default::default(),
        }
    }

    #[test]
    fn grid_is_the_product_minus_excludes() {
        let k = kernel(&[("A", &[1, 2]), ("B", &[3, 4, 5])], &[]);
        assert_eq!(k.configs().unwrap().len(), 6);
        let k = kernel(
            &[("A", &[1, 2]), ("B", &[3, 4, 5])],
            &[&[("A", 1), ("B", 3)]],
        );
        let configs = k.configs().unwrap();
        assert_eq!(configs.len(), 5);
        assert!(!configs.iter().any(|c| c.to_string() == "A=1,B=3"));
        let k = kernel(&[("A", &[1, 2]), ("B", &[3, 4, 5])], &[&[("A", 2)]]);
        assert_eq!(k.configs().unwrap().len(), 3);
        assert_eq!(k.configs().unwrap()[0].to_string(), "A=1,B=3");
    }

    #[test]
    fn no_params_is_one_empty_config() {
        let k = kernel(&[], &[]);
        assert_eq!(k.configs().unwrap(), [Config::default()]);
        assert_eq!(k.configs().unwrap()[0].to_string(), "-");
    }

    #[test]
    fn identifiers() {
        assert!(is_c_identifier("BLOCK_M"));
        assert!(is_c_identifier("_x1"));
        assert!(!is_c_identifier("1x"));
        assert!(!is_c_identifier("a-b"));
        assert!(!is_c_identifier(""));
        assert_eq!(ParamValue::parse("64"), Some(ParamValue::Int(64)));
        assert_eq!(
            ParamValue::parse("half"),
            Some(ParamValue::Ident("half".into()))
        );
        assert_eq!(ParamValue::parse("a b"), None);
    }

    #[test]
    fn reserved_flags_are_refused() {
        for f in [
            "-arch=sm_80",
            "-o",
            "-Ifoo",
            "-DX=1",
            "-ccbin",
            "--gpu-architecture=sm_90",
        ] {
            assert!(reserved_flag(f).is_some(), "{f}");
        }
        for f in [
            "-O3",
            "--use_fast_math",
            "-lineinfo",
            "-std=c++17",
            "-Xptxas=-O3",
        ] {
            assert!(reserved_flag(f).is_none(), "{f}");
        }
    }

    #[test]
    fn locates_offsets() {
        let f = SourceFile {
            path: "x".into(),
            text: "ab\ncde\nf",
        };
        assert_eq!(f.locate(0), (1, 1));
        assert_eq!(f.locate(4), (2, 2));
        assert_eq!(f.locate(7), (3, 1));
    }
}
