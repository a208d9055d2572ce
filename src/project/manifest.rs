//! `kart.toml` and `kernels/<name>/kernel.toml`: parsing, validation and the param grid.
//!
//! Everything here is pure file reading: no toolchain, no store. Each error names the
//! file, line and column and what to write instead.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kart_runtime::error::{Error, IoContext, Result};
use kart_runtime::expr::{Expr, ExprError, ExprErrorKind};
use kart_runtime::launch::LaunchSpec;
use kart_runtime::model::{Config, ParamValue, TuneSpec};
use kart_runtime::target::TargetArch;
use kart_runtime::text::{SourceFile, read_text};
use serde::Deserialize;
use toml::Spanned;

use crate::project::grid::{Derived, GridError, Rule, RuleOrDerived};
use crate::project::kernel::{Kernel, ParamMacros, VariantOf};

pub use kart_runtime::locate::PROJECT_FILE;
/// A kernel manifest's file name.
pub const KERNEL_FILE: &str = "kernel.toml";

/// The remote cache, as `kart.toml` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteConfig {
    /// `http://…`, `https://…` or `file://…`.
    pub url: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never write to it.
    pub read_only: bool,
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
    /// Kernels sorted by name.
    pub kernels: Vec<Kernel>,
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
        let text = read_text(&path)?;
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
                    url: r.url,
                    trusted: r.trusted,
                    read_only: r.read_only,
                })
            }
        };
        let components = project_components(&file, raw.toolchain.as_ref())?;
        let libraries = project_libraries(&file, &root, &raw.library)?;
        let nvcc_release = raw.toolchain.and_then(|t| t.nvcc);

        let mut kernels = Vec::new();
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
                kernels.push(load_kernel(&root, &rel, &targets, &libraries)?);
            }
        }
        kernels.sort_by(|a, b| a.name.cmp(&b.name));
        for pair in kernels.windows(2) {
            if pair[0].name == pair[1].name {
                return Err(Error::InvalidFile {
                    path: pair[1].manifest.clone(),
                    line: 1,
                    column: 1,
                    message: format!(
                        "kernel name `{}` is also used by `{}`",
                        pair[1].name,
                        pair[0].manifest.display()
                    ),
                    hint: Some("give every kernel a unique `name`".into()),
                });
            }
        }
        check_variants(&kernels)?;
        Ok(Project {
            root,
            kernels_dir,
            store_dir,
            targets,
            nvcc_release,
            components,
            libraries,
            remote,
            kernels,
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
        self.kernels.iter().find(|k| k.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
            Error::usage(
                format!("no kernel named `{name}`"),
                Some(format!("kernels in this project: {}", names.join(", "))),
            )
        })
    }
}

/// Loads one kernel manifest; `dir` is relative to `root`.
pub fn load_kernel(
    root: &Path,
    dir: &Path,
    default_targets: &[TargetArch],
    known_libraries: &BTreeMap<String, crate::project::library::Library>,
) -> Result<Kernel> {
    // Parsing: the file's text into typed, spanned fields (syntax and types only).
    let manifest = dir.join(KERNEL_FILE);
    let text = read_text(&root.join(&manifest))?;
    let file = SourceFile {
        path: manifest.clone(),
        text: &text,
    };
    let raw: RawKernel = file.parse()?;
    // Validation: each field against the rules and the file system, in order, every
    // error pointing at the field's line and column.
    let at = KernelDir {
        root,
        dir,
        abs_dir: root.join(dir),
    };
    let name = kernel_name(&file, &raw)?;
    let sources = sources(&file, &raw, &at)?;
    let include = includes(&file, &raw, &at)?;
    let (entry, templates) = entries(&file, &raw)?;
    let targets = targets(&file, &raw, default_targets)?;
    let flags = flags(&file, &raw)?;
    let defines = defines(&file, &raw)?;
    let params = params(&file, &raw, &defines)?;
    let exclude = excludes(&file, &raw, &params)?;
    let signature = signature(&file, &raw, &entry)?;
    let mut kernel = Kernel {
        name,
        dir: dir.to_path_buf(),
        manifest,
        sources,
        include,
        entry,
        templates,
        param_macros: param_macros(&file, &raw)?,
        libraries: libraries(&file, &raw, known_libraries)?,
        targets,
        flags,
        defines,
        ptx: raw.ptx,
        params,
        exclude,
        signature,
        default: None,
        tune: None,
        require: Vec::new(),
        derived: Vec::new(),
        launch: None,
        variant_of: raw.variant_of.as_ref().map(|v| {
            let (line, column) = file.locate(v.span().start);
            VariantOf {
                base: v.get_ref().clone(),
                line,
                column,
            }
        }),
        declared_in_source: Default::default(),
        kept: Default::default(),
    };
    kernel.derived = derived(&file, &raw, &kernel)?;
    kernel.declared_in_source = declared_derived(&kernel, root)?;
    kernel.require = rules(&file, &raw, &kernel)?;
    kernel.launch = launch(&file, &raw, &kernel)?;
    let configs = check_grid(&file, &raw, &kernel)?;
    kernel.tune = tune_spec(&file, &raw, &kernel)?;
    kernel.default = default_config(&file, &raw, &kernel, &configs)?;
    kernel.kept = configs.into();
    Ok(kernel)
}

/// The derived params the kernel's sources declare themselves.
fn declared_derived(kernel: &Kernel, root: &Path) -> Result<std::collections::BTreeSet<String>> {
    let names: Vec<&str> = kernel.derived.iter().map(|d| d.name.as_str()).collect();
    let mut found = std::collections::BTreeSet::new();
    if names.is_empty() {
        return Ok(found);
    }
    for source in &kernel.sources {
        let text = read_text(&root.join(source))?;
        found.extend(crate::project::entry::declared_names(&text, &names));
    }
    Ok(found)
}

/// Where a kernel lives: the project root, its folder relative to it, and absolute.
struct KernelDir<'a> {
    root: &'a Path,
    dir: &'a Path,
    abs_dir: PathBuf,
}

/// `name`: a C identifier.
fn kernel_name(file: &SourceFile<'_>, raw: &RawKernel) -> Result<String> {
    let name = raw.name.get_ref().clone();
    if !is_c_identifier(&name) {
        return Err(file.error(
            raw.name.span(),
            format!("kernel name `{name}` is not a C identifier"),
            "use letters, digits and `_`, not starting with a digit",
        ));
    }

    Ok(name)
}

/// `sources`: at least one, each a file inside the kernel's folder.
fn sources(file: &SourceFile<'_>, raw: &RawKernel, at: &KernelDir<'_>) -> Result<Vec<PathBuf>> {
    let (root, dir, abs_dir) = (at.root, at.dir, &at.abs_dir);
    if raw.sources.get_ref().is_empty() {
        return Err(file.error(
            raw.sources.span(),
            "`sources` is empty",
            "list the `.cu` file to compile first, e.g. `sources = [\"kernel.cu\"]`",
        ));
    }
    let mut sources = Vec::new();
    for s in raw.sources.get_ref() {
        let p = file.inside_root(root, abs_dir, s, "source")?;
        if !p.starts_with(dir) || p == dir {
            return Err(file.error(
                s.span(),
                format!("source `{}` is outside the kernel folder", s.get_ref()),
                "sources live in the kernel's own folder; shared headers go in an `include` folder",
            ));
        }
        if !root.join(&p).is_file() {
            return Err(file.error(
                s.span(),
                format!("source `{}` does not exist", s.get_ref()),
                format!(
                    "create it or fix the path (relative to `{}`)",
                    dir.display()
                ),
            ));
        }
        sources.push(p);
    }

    Ok(sources)
}

/// `include`: folders inside the project.
fn includes(file: &SourceFile<'_>, raw: &RawKernel, at: &KernelDir<'_>) -> Result<Vec<PathBuf>> {
    let (root, dir, abs_dir) = (at.root, at.dir, &at.abs_dir);
    let mut include = Vec::new();
    for s in &raw.include {
        let p = file.inside_root(root, abs_dir, s, "include folder")?;
        if !root.join(&p).is_dir() {
            return Err(file.error(
                s.span(),
                format!("include folder `{}` does not exist", s.get_ref()),
                format!(
                    "create it or fix the path (relative to `{}`)",
                    dir.display()
                ),
            ));
        }
        include.push(p);
    }

    Ok(include)
}

/// The template entries of a kernel, by name.
type Templates = BTreeMap<String, crate::project::entry::TemplateEntry>;

/// `entry`: at least one, each an `extern "C"` symbol or a template instantiation over
/// params, no two with the same name.
fn entries(file: &SourceFile<'_>, raw: &RawKernel) -> Result<(Vec<String>, Templates)> {
    use crate::project::entry::EntrySpec;
    if raw.entry.get_ref().is_empty() {
        return Err(file.error(
            raw.entry.span(),
            "`entry` is empty",
            "list the `__global__` functions every cubin must contain: `extern \"C\"` names, or template instantiations like \"gemm<BLOCK_M, BLOCK_N>\"",
        ));
    }
    let mut entry = Vec::new();
    let mut templates = BTreeMap::new();
    for e in raw.entry.get_ref() {
        let spec = EntrySpec::parse(e.get_ref()).map_err(|why| {
            file.error(
                e.span(),
                why,
                "write an `extern \"C\"` function name, or a template name with its arguments over params: \"gemm<BLOCK_M, BLOCK_N, float>\"",
            )
        })?;
        let name = spec.name().to_string();
        if entry.contains(&name) {
            return Err(file.error(
                e.span(),
                format!("two entries are named `{name}`"),
                "callers find an entry by its name, so each must be unique; instantiate one template once per kernel",
            ));
        }
        if let EntrySpec::Template(t) = spec {
            templates.insert(name.clone(), t);
        }
        entry.push(name);
    }

    Ok((entry, templates))
}

/// `libraries`: names of `[library.NAME]` tables in kart.toml.
fn libraries(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    known: &BTreeMap<String, crate::project::library::Library>,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for l in &raw.libraries {
        if !known.contains_key(l.get_ref()) {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(file.error(
                l.span(),
                format!("library `{}` is not declared in kart.toml", l.get_ref()),
                if names.is_empty() {
                    "declare it in kart.toml: [library.NAME] with `pip` (a pinned package) or `path` (a folder)".to_string()
                } else {
                    format!("libraries of kart.toml: {}", names.join(", "))
                },
            ));
        }
        if !out.contains(l.get_ref()) {
            out.push(l.get_ref().clone());
        }
    }
    Ok(out)
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

/// `param_macros`: "auto" (default), "all" or "none".
fn param_macros(file: &SourceFile<'_>, raw: &RawKernel) -> Result<ParamMacros> {
    let Some(v) = &raw.param_macros else {
        return Ok(ParamMacros::Auto);
    };
    ParamMacros::parse(v.get_ref()).ok_or_else(|| {
        file.error(
            v.span(),
            format!("`param_macros = \"{}\"` is not one of auto, all, none", v.get_ref()),
            "auto: params a template entry uses are template arguments only, the rest macros; all: every param is also a macro; none: no param macros",
        )
    })
}

/// `targets`: the kernel's own, else the project's.
fn targets(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    default_targets: &[TargetArch],
) -> Result<Vec<TargetArch>> {
    let targets = match &raw.targets {
        Some(t) => {
            let targets = file.targets(t)?;
            if targets.is_empty() {
                return Err(file.error(
                    t.span(),
                    "`targets` is empty",
                    "list at least one target, or remove the key to use the project's",
                ));
            }
            targets
        }
        None => default_targets.to_vec(),
    };

    Ok(targets)
}

/// `flags`: none that kart sets itself.
fn flags(file: &SourceFile<'_>, raw: &RawKernel) -> Result<Vec<String>> {
    let mut flags = Vec::new();
    for f in &raw.flags {
        if let Some(reason) = reserved_flag(f.get_ref()) {
            return Err(file.error(
                f.span(),
                format!("flag `{}` is not allowed here: {reason}", f.get_ref()),
                "remove it; kart passes targets, outputs, includes and params itself",
            ));
        }
        flags.push(f.get_ref().clone());
    }

    Ok(flags)
}

/// `defines`: names and values.
fn defines(file: &SourceFile<'_>, raw: &RawKernel) -> Result<BTreeMap<String, ParamValue>> {
    let mut defines = BTreeMap::new();
    for (k, v) in &raw.defines {
        file.check_name(k.get_ref(), k.span(), "define")?;
        let value = file.value(v)?;
        defines.insert(k.get_ref().clone(), value);
    }

    Ok(defines)
}

/// `[params]`: the grid; no name both a param and a define, no empty or repeated values.
fn params(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    defines: &BTreeMap<String, ParamValue>,
) -> Result<BTreeMap<String, Vec<ParamValue>>> {
    let mut params = BTreeMap::new();
    for (k, values) in &raw.params {
        file.check_name(k.get_ref(), k.span(), "param")?;
        if defines.contains_key(k.get_ref()) {
            return Err(file.error(
                k.span(),
                format!("`{}` is both a param and a define", k.get_ref()),
                "keep it in one of `[params]` or `defines`",
            ));
        }
        if values.get_ref().is_empty() {
            return Err(file.error(
                values.span(),
                format!("param `{}` has no values", k.get_ref()),
                "give it at least one value, or remove it",
            ));
        }
        let mut list = Vec::new();
        for v in values.get_ref() {
            let value = file.value(v)?;
            if list.contains(&value) {
                return Err(file.error(
                    v.span(),
                    format!("param `{}` lists `{value}` twice", k.get_ref()),
                    "remove the repeated value",
                ));
            }
            list.push(value);
        }
        params.insert(k.get_ref().clone(), list);
    }

    Ok(params)
}

/// `[[exclude]]`: partial assignments of values the grid has.
fn excludes(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    params: &BTreeMap<String, Vec<ParamValue>>,
) -> Result<Vec<BTreeMap<String, ParamValue>>> {
    let mut exclude = Vec::new();
    for e in &raw.exclude {
        if e.get_ref().is_empty() {
            return Err(file.error(
                e.span(),
                "empty `[[exclude]]` entry (it would exclude every config)",
                "name at least one param and value",
            ));
        }
        let mut partial = BTreeMap::new();
        for (k, v) in e.get_ref() {
            let Some(values) = params.get(k.get_ref()) else {
                return Err(file.error(
                    k.span(),
                    format!(
                        "`[[exclude]]` names `{}`, which is not a param",
                        k.get_ref()
                    ),
                    format!(
                        "params of this kernel: {}",
                        params.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            let value = file.value(v)?;
            if !values.contains(&value) {
                return Err(file.error(
                    v.span(),
                    format!("`[[exclude]]`: `{}` has no value `{value}`", k.get_ref()),
                    "exclude only values the grid contains",
                ));
            }
            partial.insert(k.get_ref().clone(), value);
        }
        exclude.push(partial);
    }

    Ok(exclude)
}

/// `[signature]`: parameter kinds of declared entries.
fn signature(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    entry: &[String],
) -> Result<BTreeMap<String, Vec<crate::signature::ParamKind>>> {
    let mut signature = BTreeMap::new();
    for (e, kinds) in &raw.signature {
        if !entry.contains(e.get_ref()) {
            return Err(file.error(
                e.span(),
                format!(
                    "`[signature]` names `{}`, which is not an entry",
                    e.get_ref()
                ),
                format!("entries of this kernel: {}", entry.join(", ")),
            ));
        }
        let mut list = Vec::new();
        for k in kinds.get_ref() {
            let kind = k
                .get_ref()
                .parse::<crate::signature::ParamKind>()
                .map_err(|why| {
                    file.error(
                        k.span(),
                        why,
                        "write the C type's kart name, e.g. \"ptr\" for any pointer",
                    )
                })?;
            list.push(kind);
        }
        signature.insert(e.get_ref().clone(), list);
    }

    Ok(signature)
}

/// `[tune]`: exact params mapped to problem keys, nearest keys, the program.
fn tune_spec(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Option<TuneSpec>> {
    let Some(t) = &raw.tune else {
        return Ok(None);
    };
    let mut spec = TuneSpec::default();
    for (param, key) in &t.exact {
        if !kernel.params.contains_key(param.get_ref()) {
            return Err(file.error(
                param.span(),
                format!(
                    "`[tune] exact` names `{}`, which is not a param",
                    param.get_ref()
                ),
                "map each exact param to the problem key it must equal: HEAD_DIM = \"D\"",
            ));
        }
        file.check_name(key.get_ref(), key.span(), "problem key")?;
        spec.exact
            .insert(param.get_ref().clone(), key.get_ref().clone());
    }
    for key in &t.nearest {
        file.check_name(key.get_ref(), key.span(), "problem key")?;
        spec.nearest.push(key.get_ref().clone());
    }
    spec.program = t.program.clone();
    Ok(Some(spec))
}

/// An expression of the file: parsed, with errors pointing into the TOML string.
fn expression(file: &SourceFile<'_>, text: &Spanned<String>, what: &str) -> Result<Expr> {
    Expr::parse(text.get_ref()).map_err(|e| expr_error(file, text, &e, what, None))
}

/// An expression error at its column inside the TOML string `text`.
fn expr_error(
    file: &SourceFile<'_>,
    text: &Spanned<String>,
    e: &ExprError,
    what: &str,
    config: Option<&Config>,
) -> Error {
    // The string's content starts after its opening quote.
    let start = text.span().start + 1 + e.span.start;
    let end = text.span().start + 1 + e.span.end.max(e.span.start);
    let on = config.map_or_else(String::new, |c| format!(" for config {c}"));
    let hint = match e.kind {
        ExprErrorKind::Syntax => {
            "expressions use integers, names, + - * / %, comparisons, && || !, parentheses, min, max, cdiv"
        }
        ExprErrorKind::UnknownName => {
            "use the kernel's params (and, in [derived] and require, derived params; in [launch], problem keys too)"
        }
        ExprErrorKind::DivisionByZero => {
            "guard the division, or add a `require` rule that removes such configs first"
        }
        ExprErrorKind::NotInteger => "an identifier-valued param cannot take part in arithmetic",
        ExprErrorKind::Overflow => "values are 64-bit integers",
    };
    file.error(
        start..end,
        format!("{what} \"{}\"{on}: {e}", text.get_ref()),
        hint,
    )
}

/// Checks that every name of `expr` is known.
fn known_names(
    file: &SourceFile<'_>,
    text: &Spanned<String>,
    expr: &Expr,
    what: &str,
    known: &dyn Fn(&str) -> bool,
) -> Result<()> {
    for (name, span) in expr.names() {
        if !known(name) {
            let e = ExprError {
                span,
                kind: ExprErrorKind::UnknownName,
                message: format!("unknown name `{name}`"),
            };
            return Err(expr_error(file, text, &e, what, None));
        }
    }
    Ok(())
}

/// `[derived]`: C identifiers, not params or defines, over params and other derived
/// params without cycles; ordered so each comes after what it uses.
fn derived(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Vec<Derived>> {
    let mut pending = Vec::new();
    for (name, text) in &raw.derived {
        file.check_name(name.get_ref(), name.span(), "derived param")?;
        if kernel.params.contains_key(name.get_ref()) || kernel.defines.contains_key(name.get_ref())
        {
            return Err(file.error(
                name.span(),
                format!(
                    "derived param `{}` is also a param or a define",
                    name.get_ref()
                ),
                "give it its own name",
            ));
        }
        let expr = expression(file, text, &format!("[derived] {}", name.get_ref()))?;
        let known =
            |n: &str| kernel.params.contains_key(n) || raw.derived.keys().any(|k| k.get_ref() == n);
        known_names(
            file,
            text,
            &expr,
            &format!("[derived] {}", name.get_ref()),
            &known,
        )?;
        pending.push((name, text, expr));
    }
    // Order by dependencies: repeatedly take those whose derived inputs are done.
    let mut ordered: Vec<Derived> = Vec::new();
    while !pending.is_empty() {
        let ready = pending.iter().position(|(_, _, e)| {
            e.names().iter().all(|(n, _)| {
                kernel.params.contains_key(*n) || ordered.iter().any(|d| d.name == *n)
            })
        });
        let Some(i) = ready else {
            let (name, _, _) = &pending[0];
            return Err(file.error(
                name.span(),
                format!(
                    "derived param `{}` depends on itself through others",
                    name.get_ref()
                ),
                "break the cycle: compute each derived param from params and earlier ones",
            ));
        };
        let (name, _, expr) = pending.remove(i);
        ordered.push(Derived {
            name: name.get_ref().clone(),
            expr,
        });
    }
    Ok(ordered)
}

/// `require`: rules over params and derived params.
fn rules(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Vec<Rule>> {
    let mut rules = Vec::new();
    for text in &raw.require {
        let expr = expression(file, text, "require")?;
        let known =
            |n: &str| kernel.params.contains_key(n) || kernel.derived.iter().any(|d| d.name == n);
        known_names(file, text, &expr, "require", &known)?;
        rules.push(Rule { expr });
    }
    Ok(rules)
}

/// `[launch]`: 1 to 3 grid and block expressions, optional shared memory, and
/// `[launch.args]`; names that are not params are the problem's keys, checked at launch.
fn launch(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Option<LaunchSpec>> {
    let Some(l) = &raw.launch else {
        return Ok(None);
    };
    let list = |v: &Spanned<Vec<Spanned<String>>>, what: &str| -> Result<Vec<Expr>> {
        if v.get_ref().is_empty() || v.get_ref().len() > 3 {
            return Err(file.error(
                v.span(),
                format!("[launch] {what} takes 1 to 3 expressions (x, y, z)"),
                format!("for example {what} = [\"cdiv(S, BLOCK_M)\", \"B * H\"]"),
            ));
        }
        v.get_ref()
            .iter()
            .map(|t| expression(file, t, &format!("[launch] {what}")))
            .collect()
    };
    let mut args = BTreeMap::new();
    for (entry, slots) in &l.args {
        args.insert(
            entry.get_ref().clone(),
            launch_args(file, kernel, entry, slots)?,
        );
    }
    Ok(Some(LaunchSpec {
        grid: list(&l.grid, "grid")?,
        block: list(&l.block, "block")?,
        shared_mem: l
            .shared_mem
            .as_ref()
            .map(|t| expression(file, t, "[launch] shared_mem"))
            .transpose()?,
        args,
    }))
}

const ARGS_HINT: &str = "each parameter is \"pass\" (the caller's argument), { value = \"EXPR\" } (an integer kart computes), or { tensormap = \"f16\", shape = [...], tile = [...], swizzle = 128 } (a tensor map kart makes over the caller's pointer)";

/// One entry's `[launch.args]`: a slot per parameter of its declared signature.
fn launch_args(
    file: &SourceFile<'_>,
    kernel: &Kernel,
    entry: &Spanned<String>,
    slots: &Spanned<Vec<Spanned<toml::Value>>>,
) -> Result<Vec<crate::call::ArgSpec>> {
    use crate::call::ArgSpec;
    use crate::runtime::tma::TmaType;
    use crate::signature::ParamKind;
    let Some(signature) = kernel.signature.get(entry.get_ref()) else {
        return Err(file.error(
            entry.span(),
            format!(
                "[launch.args] names `{}`, which is not an entry with a [signature]",
                entry.get_ref()
            ),
            "declare the entry's parameter kinds in [signature] first; [launch.args] says how kart makes each of them",
        ));
    };
    if slots.get_ref().len() != signature.len() {
        return Err(file.error(
            slots.span(),
            format!(
                "[launch.args] {} has {} slots, but its [signature] has {} parameters",
                entry.get_ref(),
                slots.get_ref().len(),
                signature.len()
            ),
            ARGS_HINT,
        ));
    }
    // Expressions inside a slot's table have no span of their own: errors point at the
    // slot and quote the text.
    let expr_at = |slot: &Spanned<toml::Value>, what: &str, value: &toml::Value| -> Result<Expr> {
        let text = match value {
            toml::Value::String(t) => t.clone(),
            toml::Value::Integer(i) => i.to_string(),
            _ => {
                return Err(file.error(
                    slot.span(),
                    format!("[launch.args] {what} must be an expression (a string) or an integer"),
                    ARGS_HINT,
                ));
            }
        };
        Expr::parse(&text).map_err(|e| {
            file.error(
                slot.span(),
                format!("[launch.args] {what} = \"{text}\": {}", e.message),
                "expressions use integers, names (params, derived params, problem keys), + - * / %, comparisons, min, max, cdiv",
            )
        })
    };
    let mut out = Vec::new();
    for (i, (slot, kind)) in slots.get_ref().iter().zip(signature).enumerate() {
        let at = format!("{} parameter {i} ({kind})", entry.get_ref());
        let bad =
            |why: String| file.error(slot.span(), format!("[launch.args] {at}: {why}"), ARGS_HINT);
        let spec = match slot.get_ref() {
            toml::Value::String(w) if w == "pass" => ArgSpec::Pass,
            toml::Value::Table(t) => {
                let known = ["value", "tensormap", "shape", "tile", "swizzle"];
                if let Some(k) = t.keys().find(|k| !known.contains(&k.as_str())) {
                    return Err(bad(format!("unknown key `{k}`")));
                }
                match (t.get("value"), t.get("tensormap")) {
                    (Some(v), None) if t.len() == 1 => {
                        if !kind.is_integer() {
                            return Err(bad("a computed value goes only into an integer parameter".into()));
                        }
                        ArgSpec::Value(expr_at(slot, &format!("{at} value"), v)?)
                    }
                    (None, Some(toml::Value::String(dtype))) => {
                        if *kind != ParamKind::TensorMap {
                            return Err(bad("a tensor map goes only into a `tensormap` parameter".into()));
                        }
                        if TmaType::from_name(dtype).is_none() {
                            return Err(bad(format!(
                                "`{dtype}` is not a tensor map element type (one of {})",
                                TmaType::NAMES.join(", ")
                            )));
                        }
                        let exprs = |what: &str| -> Result<Vec<Expr>> {
                            match t.get(what) {
                                Some(toml::Value::Array(v)) if (1..=5).contains(&v.len()) => v
                                    .iter()
                                    .enumerate()
                                    .map(|(d, e)| expr_at(slot, &format!("{at} {what}[{d}]"), e))
                                    .collect(),
                                _ => Err(bad(format!(
                                    "`{what}` must be a list of 1 to 5 sizes, outermost first"
                                ))),
                            }
                        };
                        let shape = exprs("shape")?;
                        let tile = exprs("tile")?;
                        if shape.len() != tile.len() {
                            return Err(bad("`shape` and `tile` need one size per dimension".into()));
                        }
                        let swizzle = match t.get("swizzle") {
                            None => 0,
                            Some(toml::Value::Integer(b)) if [0, 32, 64, 128].contains(b) => *b as u32,
                            Some(_) => return Err(bad("`swizzle` must be 0, 32, 64 or 128 (bytes)".into())),
                        };
                        ArgSpec::TensorMap {
                            dtype: dtype.clone(),
                            shape,
                            tile,
                            swizzle,
                        }
                    }
                    _ => return Err(bad("a table holds either `value` alone or `tensormap` with `shape`, `tile` and `swizzle`".into())),
                }
            }
            other => return Err(bad(format!("`{other}` is not a slot"))),
        };
        out.push(spec);
    }
    Ok(out)
}

/// Every `variant_of` names a kernel that is no variant itself, and the variant is
/// called as its base is: the same entries with the same call signatures, the same
/// tuning problem.
fn check_variants(kernels: &[Kernel]) -> Result<()> {
    for k in kernels {
        let Some(v) = &k.variant_of else { continue };
        let fail = |message: String, hint: String| Error::InvalidFile {
            path: k.manifest.clone(),
            line: v.line,
            column: v.column,
            message,
            hint: Some(hint),
        };
        let Some(base) = kernels.iter().find(|b| b.name == v.base) else {
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
    }
    Ok(())
}

/// Every rule and derived param evaluates on every config `[[exclude]]` leaves; the
/// configs kept.
fn check_grid(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Vec<Config>> {
    match kernel.grid_report() {
        Ok((_, configs)) => Ok(configs),
        Err(GridError { at, config, error }) => {
            let (text, what) = match at {
                RuleOrDerived::Rule(i) => (&raw.require[i], "require".to_string()),
                RuleOrDerived::Derived(i) => {
                    let name = &kernel.derived[i].name;
                    // Every derived param came from this table.
                    let Some((_, text)) = raw.derived.iter().find(|(k, _)| k.get_ref() == name)
                    else {
                        return Err(file.error(0..0, format!("[derived] {name}: {error}"), ""));
                    };
                    (text, format!("[derived] {name}"))
                }
            };
            Err(expr_error(file, text, &error, &what, Some(&config)))
        }
    }
}

/// The grid is not empty, and `default` is one of its configs.
fn default_config(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
    configs: &[Config],
) -> Result<Option<Config>> {
    if configs.is_empty() {
        return Err(file.error(
            0..0,
            "`[[exclude]]` and `require` leave no config of the grid",
            "remove or narrow an `[[exclude]]` entry or a rule (`kart build --explain-grid` shows what each removes)",
        ));
    }
    if let Some(d) = &raw.default {
        let mut config = Config::default();
        for (k, v) in d.get_ref() {
            if !kernel.params.contains_key(k.get_ref()) {
                return Err(file.error(
                    k.span(),
                    format!("`default` names `{}`, which is not a param", k.get_ref()),
                    "give a value for each param of `[params]`",
                ));
            }
            config.0.insert(k.get_ref().clone(), file.value(v)?);
        }
        if !configs.contains(&config) {
            return Err(file.error(
                d.span(),
                format!("`default` {config} is not a config of the grid (a param missing, a value not listed, or excluded)"),
                "name one value of every param, a combination the grid builds",
            ));
        }
        return Ok(Some(config));
    }
    Ok(None)
}

/// Why a flag cannot be given in `flags`, if it cannot.
fn reserved_flag(flag: &str) -> Option<&'static str> {
    let name = flag.split('=').next().unwrap_or(flag);
    match name {
        "-arch" | "--gpu-architecture" | "-gencode" | "--generate-code" | "-code"
        | "--gpu-code" => Some("targets come from `targets`"),
        "-o" | "--output-file" | "-odir" | "--output-directory" | "-cubin" | "--cubin" | "-ptx"
        | "--ptx" | "-c" | "--compile" | "-fatbin" | "--fatbin" => Some("kart chooses the output"),
        "-ccbin" | "--compiler-bindir" => Some("the host compiler is not part of the key"),
        "-MD" | "-MF" | "-M" | "-MM" | "-MMD" | "--generate-dependencies" => {
            Some("kart writes the dependency file itself")
        }
        _ if flag.starts_with("-I") || flag.starts_with("--include-path") => {
            Some("include folders go in `include`, so they are part of the key")
        }
        _ if flag.starts_with("-D") || flag.starts_with("--define-macro") => {
            Some("defines go in `defines` or `[params]`")
        }
        _ => None,
    }
}

use kart_runtime::untrusted::is_c_identifier;

/// The checks of values only manifests hold, on a manifest's text.
trait ManifestChecks {
    fn check_name(&self, name: &str, span: Range<usize>, what: &str) -> Result<()>;
    fn value(&self, v: &Spanned<RawValue>) -> Result<ParamValue>;
    fn targets(&self, list: &Spanned<Vec<Spanned<String>>>) -> Result<Vec<TargetArch>>;
}

impl ManifestChecks for SourceFile<'_> {
    fn check_name(&self, name: &str, span: Range<usize>, what: &str) -> Result<()> {
        if is_c_identifier(name) {
            Ok(())
        } else {
            Err(self.error(
                span,
                format!("{what} name `{name}` is not a C identifier"),
                "it becomes `-DNAME=VALUE`: use letters, digits and `_`, not starting with a digit",
            ))
        }
    }

    fn value(&self, v: &Spanned<RawValue>) -> Result<ParamValue> {
        match v.get_ref() {
            RawValue::Int(i) => Ok(ParamValue::Int(*i)),
            RawValue::Text(s) if is_c_identifier(s) => Ok(ParamValue::Ident(s.clone())),
            RawValue::Text(s) if s.trim().parse::<i64>().is_ok() => Err(self.error(
                v.span(),
                format!("value \"{s}\" is a string, and kart keeps integers and names apart"),
                format!("write the integer without quotes: {}", s.trim()),
            )),
            RawValue::Text(s) => Err(self.error(
                v.span(),
                format!("value `{s}` is neither an integer nor a C identifier"),
                "values become `-DNAME=VALUE`: write an integer or an identifier such as `half`",
            )),
            RawValue::Other(_) => Err(self.error(
                v.span(),
                "values must be integers or identifier strings",
                "write e.g. `64` or `\"half\"`",
            )),
        }
    }

    fn targets(&self, list: &Spanned<Vec<Spanned<String>>>) -> Result<Vec<TargetArch>> {
        let mut targets = Vec::new();
        for t in list.get_ref() {
            let target: TargetArch =
                t.get_ref().parse().map_err(|e: crate::target::BadTarget| {
                    self.error(
                        t.span(),
                        e.0,
                        "see `nvcc --list-gpu-code` for the ones nvcc knows",
                    )
                })?;
            if targets.contains(&target) {
                return Err(self.error(
                    t.span(),
                    format!("target `{target}` is listed twice"),
                    "remove the repeated target",
                ));
            }
            targets.push(target);
        }
        Ok(targets)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProject {
    project: RawProjectSection,
    toolchain: Option<RawToolchain>,
    remote: Option<RawRemote>,
    #[serde(default)]
    library: BTreeMap<Spanned<String>, Spanned<RawLibrary>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProjectSection {
    kernels: Option<Spanned<String>>,
    store: Option<Spanned<String>>,
    #[serde(default)]
    store_outside_project: bool,
    targets: Spanned<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolchain {
    nvcc: Option<String>,
    #[serde(default)]
    components: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLibrary {
    pip: Option<Spanned<String>>,
    include: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    sha256: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    url: String,
    #[serde(default)]
    trusted: bool,
    #[serde(default)]
    read_only: bool,
    connect_timeout: Option<Spanned<f64>>,
    first_byte_timeout: Option<Spanned<f64>>,
    stall_timeout: Option<Spanned<f64>>,
    give_up_after: Option<Spanned<f64>>,
    min_rate: Option<Spanned<f64>>,
    budget: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKernel {
    name: Spanned<String>,
    sources: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    include: Vec<Spanned<String>>,
    entry: Spanned<Vec<Spanned<String>>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    flags: Vec<Spanned<String>>,
    #[serde(default)]
    defines: BTreeMap<Spanned<String>, Spanned<RawValue>>,
    #[serde(default)]
    ptx: bool,
    #[serde(default)]
    params: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<RawValue>>>>,
    #[serde(default)]
    exclude: Vec<Spanned<BTreeMap<Spanned<String>, Spanned<RawValue>>>>,
    #[serde(default)]
    signature: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<String>>>>,
    default: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawValue>>>>,
    tune: Option<RawTune>,
    #[serde(default)]
    require: Vec<Spanned<String>>,
    #[serde(default)]
    derived: BTreeMap<Spanned<String>, Spanned<String>>,
    launch: Option<RawLaunch>,
    variant_of: Option<Spanned<String>>,
    param_macros: Option<Spanned<String>>,
    #[serde(default)]
    libraries: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    grid: Spanned<Vec<Spanned<String>>>,
    block: Spanned<Vec<Spanned<String>>>,
    shared_mem: Option<Spanned<String>>,
    #[serde(default)]
    args: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<toml::Value>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTune {
    #[serde(default)]
    exact: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    nearest: Vec<Spanned<String>>,
    #[serde(default)]
    program: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Int(i64),
    Text(String),
    Other(serde::de::IgnoredAny),
}

#[cfg(test)]
mod tests {
    use super::*;

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
            kept: Default::default(),
        }
    }

    #[test]
    fn grid_is_the_product_minus_excludes() {
        let k = kernel(&[("A", &[1, 2]), ("B", &[3, 4, 5])], &[]);
        assert_eq!(k.configs().len(), 6);
        let k = kernel(
            &[("A", &[1, 2]), ("B", &[3, 4, 5])],
            &[&[("A", 1), ("B", 3)]],
        );
        let configs = k.configs();
        assert_eq!(configs.len(), 5);
        assert!(!configs.iter().any(|c| c.to_string() == "A=1,B=3"));
        let k = kernel(&[("A", &[1, 2]), ("B", &[3, 4, 5])], &[&[("A", 2)]]);
        assert_eq!(k.configs().len(), 3);
        assert_eq!(k.configs()[0].to_string(), "A=1,B=3");
    }

    #[test]
    fn no_params_is_one_empty_config() {
        let k = kernel(&[], &[]);
        assert_eq!(k.configs(), vec![Config::default()]);
        assert_eq!(k.configs()[0].to_string(), "-");
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
