//! One `kernels/<name>/kernel.toml`: read, each key checked where it is written, and
//! turned into a [`Kernel`]. The grid's expressions are checked in
//! [`super::grid_toml`], `[launch]` in [`super::launch_toml`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kart_runtime::error::Result;
use kart_runtime::model::ParamValue;
use kart_runtime::target::TargetArch;
use kart_runtime::text::{Limit, SourceFile, read_text};
use kart_runtime::untrusted::is_c_identifier;

use crate::project::grid_toml::{check_grid, default_config, derived, rules, tune_spec};
use crate::project::kernel::{Kernel, ParamMacros, VariantOf};
use crate::project::launch_toml::launch;
use crate::project::problem_params::{launch_params, problem_params};
use crate::project::raw::{ManifestChecks, RawKernel, RawValue};
use crate::project::unit_toml::{define_params, prelude};

/// A kernel manifest's file name.
pub const KERNEL_FILE: &str = "kernel.toml";

/// Loads one kernel manifest; `dir` is relative to `root`.
pub(super) fn load_kernel(
    root: &Path,
    dir: &Path,
    default_targets: &[TargetArch],
    known_libraries: &BTreeMap<String, crate::project::library::Library>,
) -> Result<Kernel> {
    // Parsing: the file's text into typed, spanned fields (syntax and types only).
    let manifest = dir.join(KERNEL_FILE);
    let text = read_text(&root.join(&manifest), Limit::MANIFEST)?;
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
    let (defines, defined) = defines(&file, &raw)?;
    let problem_params = problem_params(&file, &raw)?;
    let mut params = params(&file, &raw)?;
    // A problem param has no value until problems are bound (`Project::bind_problems`).
    for name in problem_params.keys() {
        params.insert(name.clone(), Vec::new());
    }
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
        defined,
        define_params: Default::default(),
        prelude: None,
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
        unmentioned: Default::default(),
        problem_params,
        problem_combos: Vec::new(),
        launch_params: Default::default(),
        launch_params_found: Default::default(),
        prune: crate::project::prune::prune(&file, raw.prune.as_ref())?,
        kept: Default::default(),
    };
    kernel.derived = derived(&file, &raw, &kernel)?;
    kernel.define_params = define_params(&file, &raw, &kernel)?;
    kernel.prelude = prelude(&file, &raw, &kernel)?;
    (kernel.declared_in_source, kernel.unmentioned) = scan_sources(&kernel, root)?;
    kernel.require = rules(&file, &raw, &kernel)?;
    kernel.launch = launch(&file, &raw, &kernel)?;
    let (declared, found) = launch_params(&file, &raw, &kernel)?;
    kernel.launch_params = declared.union(&found).cloned().collect();
    kernel.launch_params_found = found;
    // The configs themselves (a map each) only where `[launch]` is checked on every
    // one; otherwise the grid is only checked, and built when a command asks for it.
    let (report, configs) = check_grid(&file, &raw, &kernel, raw.launch.is_some())?;
    if let Some(configs) = &configs {
        crate::project::launch_toml::check_configs(&file, &raw, &kernel, configs)?;
    }
    kernel.tune = tune_spec(&file, &raw, &kernel)?;
    if kernel.problem_params.is_empty() {
        kernel.default = default_config(&file, &raw, &kernel, report.kept, configs.as_deref())?;
    }
    if let Some(configs) = configs {
        kernel.kept = configs.into();
    }
    Ok(kernel)
}

/// What the kernel's code says of its params: the derived params its sources declare
/// themselves, and the params and derived params that neither its sources nor the
/// files of its include folders mention.
fn scan_sources(kernel: &Kernel, root: &Path) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let derived: Vec<&str> = kernel.derived.iter().map(|d| d.name.as_str()).collect();
    let all: Vec<&str> = kernel
        .params
        .keys()
        .map(String::as_str)
        .chain(derived.iter().copied())
        .collect();
    let mut declared = BTreeSet::new();
    let mut mentioned = BTreeSet::new();
    if all.is_empty() {
        return Ok((declared, BTreeSet::new()));
    }
    for source in &kernel.sources {
        let text = read_text(&root.join(source), Limit::SOURCE)?;
        if !derived.is_empty() {
            declared.extend(crate::project::entry::declared_names(&text, &derived));
        }
        mentioned.extend(crate::project::entry::mentioned_names(&text, &all));
    }
    for dir in &kernel.include {
        for file in crate::tree::files_under(&root.join(dir))? {
            // Headers are text; anything else in the folder says nothing of names.
            if let Ok(text) = read_text(&file, Limit::SOURCE) {
                mentioned.extend(crate::project::entry::mentioned_names(&text, &all));
            }
        }
    }
    let unmentioned = all
        .iter()
        .filter(|n| !mentioned.contains(**n))
        .map(|n| n.to_string())
        .collect();
    Ok((declared, unmentioned))
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

/// `defines`: names and values (`-DNAME=VALUE`), and the names defined without a value
/// (`NAME = true`; `false` defines nothing).
fn defines(
    file: &SourceFile<'_>,
    raw: &RawKernel,
) -> Result<(BTreeMap<String, ParamValue>, BTreeSet<String>)> {
    let mut defines = BTreeMap::new();
    let mut defined = BTreeSet::new();
    for (k, v) in &raw.defines {
        file.check_name(k.get_ref(), k.span(), "define")?;
        match v.get_ref() {
            RawValue::Bool(true) => {
                defined.insert(k.get_ref().clone());
            }
            RawValue::Bool(false) => {}
            _ => {
                defines.insert(k.get_ref().clone(), file.value(v)?);
            }
        }
    }

    Ok((defines, defined))
}

/// `[params]`: the grid; no name both a param and a define, no empty or repeated values.
fn params(file: &SourceFile<'_>, raw: &RawKernel) -> Result<BTreeMap<String, Vec<ParamValue>>> {
    let mut params = BTreeMap::new();
    for (k, values) in &raw.params {
        file.check_name(k.get_ref(), k.span(), "param")?;
        if raw.defines.keys().any(|d| d.get_ref() == k.get_ref()) {
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

/// Why a flag cannot be given in `flags`, if it cannot.
pub(super) fn reserved_flag(flag: &str) -> Option<&'static str> {
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
