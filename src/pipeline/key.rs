//! The action key: sha256 over everything that determines an artifact, and nothing else.
//!
//! One function ([`action_preimage`]) lists the inputs as named strings; the key is the
//! [`Preimage`] digest under a versioned domain. The preimage is stored with the action
//! entry, so `kart explain` can name the input that changed between two keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::digest::{Preimage, sha256_file};
use crate::error::{Error, Result};
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::project::{KERNEL_FILE, Kernel};
use crate::target::TargetArch;
use crate::toolchain::Toolchain;
use crate::tree::collect_files;

/// Bump when anything about the key's inputs or encoding changes: every key changes
/// with it, so every artifact is rebuilt (or fetched) once.
///
/// 2: nvcc runs with reproducible module ids (see `compile::reproducible_args`), a
/// template kernel's source is included through its folder, the inputs of a kernel's
/// folder are its `sources` (not every file there), the names passed as param macros
/// are listed, and a kernel compiled with line information keys the folder it was
/// compiled in (nvcc writes it into the cubin).
pub const KEY_FORMAT_VERSION: u32 = 2;

/// The paths (relative to the project root, `/`-separated) and sha256 of every input
/// file of a kernel: its `sources`, plus the files of its declared include folders
/// ([`include_inputs`]). Other files of the kernel's folder (its check program,
/// benchmark, results) are not inputs; a compile that reads one is refused
/// (`deps::check_dependencies`). Sorted, without duplicates.
pub fn kernel_input_files(root: &Path, kernel: &Kernel) -> Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    let kernel_toml = kernel.dir.join(KERNEL_FILE);
    for path in &kernel.sources {
        let name = path.to_string_lossy().replace('\\', "/");
        files.insert(name, sha256_file(&root.join(path))?);
    }
    for dir in &kernel.include {
        for path in include_inputs(root, dir)? {
            if path == kernel_toml {
                continue;
            }
            let name = path.to_string_lossy().replace('\\', "/");
            if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(name) {
                slot.insert(sha256_file(&root.join(&path))?);
            }
        }
    }
    Ok(files)
}

/// The files of include folder `dir` (relative to the project root) that are inputs of
/// the key, relative to the root. Another kernel's folder (one with a kernel.toml, as
/// when a variant includes its base's source) gives that kernel's `sources`, as its own
/// folder would: not its program, benchmarks or results, whose edits would otherwise
/// change every key of the including kernel. Any other folder gives every file but
/// dot-files (editor leftovers).
pub fn include_inputs(root: &Path, dir: &Path) -> Result<Vec<PathBuf>> {
    let manifest = dir.join(KERNEL_FILE);
    if root.join(&manifest).is_file() {
        return kernel_sources(root, &manifest);
    }
    let mut rel = Vec::new();
    collect_files(&root.join(dir), &root.join(dir), &mut rel)?;
    Ok(rel
        .into_iter()
        .filter(|r| !r.split('/').any(|c| c.starts_with('.')))
        .map(|r| dir.join(r))
        .collect())
}

/// The `sources` of the kernel.toml at `manifest` (relative to the root), each
/// relative to the root.
fn kernel_sources(root: &Path, manifest: &Path) -> Result<Vec<PathBuf>> {
    #[derive(serde::Deserialize)]
    struct Sources {
        #[serde(default)]
        sources: Vec<String>,
    }
    let text = crate::text::read_text(&root.join(manifest), crate::text::Limit::MANIFEST)?;
    let invalid = |message: String| Error::InvalidFile {
        path: manifest.to_path_buf(),
        line: 1,
        column: 1,
        message,
        hint: Some(
            "an include folder that holds a kernel.toml contributes that kernel's `sources`".into(),
        ),
    };
    let parsed: Sources = toml::from_str(&text).map_err(|e| invalid(e.message().to_string()))?;
    let dir = manifest.parent().unwrap_or(Path::new(""));
    parsed
        .sources
        .iter()
        .map(|s| {
            let path = Path::new(s);
            if path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                Ok(dir.join(path))
            } else {
                Err(invalid(format!(
                    "source `{s}` is not a path inside the kernel's folder"
                )))
            }
        })
        .collect()
}

/// Every input of one artifact, in a fixed order. `root` (the project's absolute folder)
/// is an input only of kernels compiled with line information.
pub fn action_preimage(
    root: &Path,
    toolchain: &Toolchain,
    kernel: &Kernel,
    config: &Config,
    target: TargetArch,
    kind: ArtifactKind,
    files: &BTreeMap<String, String>,
) -> Result<Preimage> {
    let mut p = Preimage::default();
    p.push("key format", KEY_FORMAT_VERSION.to_string());
    p.push("toolchain: nvcc --version", toolchain.version_text.clone());
    for (name, hash) in &toolchain.components.0 {
        p.push(format!("toolchain: {name}"), hash.clone());
    }
    p.push("output", kind.to_string());
    p.push("target", target.to_string());
    p.push(
        "compiled source",
        kernel.sources[0].to_string_lossy().replace('\\', "/"),
    );
    // Entries as written: a template entry's expression decides its instance.
    let written: Vec<&str> = kernel
        .entry
        .iter()
        .map(|name| {
            kernel
                .templates
                .get(name)
                .map_or(name.as_str(), |t| &t.written)
        })
        .collect();
    if kernel.templates.is_empty() {
        p.push("entry", written.join(" "));
    } else {
        p.push("entry", serde_json::to_string(&written).unwrap_or_default());
    }
    // Only when not the default, so that existing kernels keep their keys.
    if kernel.param_macros != crate::project::ParamMacros::Auto {
        p.push("param macros", kernel.param_macros.name());
    }
    // Only when declared, so that kernels without one keep their keys: the signature
    // is recorded in the artifact's entry and checked against the cubin.
    for (entry, kinds) in &kernel.signature {
        let names: Vec<std::borrow::Cow<str>> = kinds.iter().map(|k| k.name()).collect();
        p.push(format!("signature {entry}"), names.join(" "));
    }
    // JSON keeps the flags' order and boundaries ("-a b" is not "-a", "b").
    p.push(
        "flags",
        serde_json::to_string(&kernel.flags).unwrap_or_default(),
    );
    for (name, value) in &kernel.defines {
        p.push(format!("define {name}"), value.to_string());
    }
    // Macros without a value, and the params that choose them: only when declared, so
    // that kernels without them keep their keys.
    for name in &kernel.defined {
        p.push(format!("define {name}"), "(defined, no value)");
    }
    if !kernel.define_params.is_empty() {
        let names: Vec<&str> = kernel.define_params.iter().map(String::as_str).collect();
        p.push("define params", names.join(" "));
    }
    // Launch-only params reach no compile input (checked when kernel.toml is read):
    // configs that differ only in them share this key, one compile and one artifact.
    for (name, value) in config.iter() {
        if kernel.launch_params.contains(name) {
            continue;
        }
        p.push(format!("param {name}"), value.to_string());
    }
    // Derived params by value (none for most kernels, whose keys stay as they were):
    // rewriting an expression without changing a value keeps the key.
    for (name, value) in kernel.derived_or_error(config)? {
        p.push(format!("derived {name}"), value.to_string());
    }
    // The names that reach the source as -D macros (their values are above): a change
    // of the rule that picks them changes the key, not silently the bytes.
    let macros: Vec<String> = kernel
        .macro_params(config)?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    p.push("param macros passed", macros.join(" "));
    // The generated unit's prelude, as written (only when set).
    if let Some(prelude) = &kernel.prelude {
        p.push("prelude", prelude.clone());
    }
    for dir in &kernel.include {
        p.push("include dir", dir.to_string_lossy().replace('\\', "/"));
    }
    // Line information names the folder nvcc ran in (cicc asks getcwd, and no flag
    // overrides it), so such a cubin is the same only where the project lies at the
    // same path.
    if let Some(flag) = kernel.line_info_flag() {
        p.push(
            format!("compile folder ({flag} writes it into the cubin)"),
            root.to_string_lossy().into_owned(),
        );
    }
    // Toolkit components and header libraries, only when declared: projects without
    // them keep their keys. A library reaches only the kernels that list it.
    if !toolchain.packages.is_empty() {
        p.push("toolchain: components", toolchain.packages.join(" "));
    }
    for name in &kernel.libraries {
        let pin = toolchain.libraries.get(name);
        p.push(
            format!("library {name}"),
            pin.map_or("not pinned".to_string(), |l| {
                format!("{} sha256:{}", l.version, l.sha256)
            }),
        );
    }
    for (path, hash) in files {
        p.push(format!("file {path}"), hash.clone());
    }
    Ok(p)
}

/// The action key of a preimage.
pub fn action_key(preimage: &Preimage) -> String {
    preimage.digest("kart-action-key")
}

/// One line per input that differs between two preimages: changed, added or removed.
pub fn diff_preimages(old: &Preimage, new: &Preimage) -> Vec<String> {
    let old_map: BTreeMap<&str, &str> = old
        .0
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let new_map: BTreeMap<&str, &str> = new
        .0
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut lines = Vec::new();
    for (name, value) in &new_map {
        match old_map.get(name) {
            None => lines.push(format!("added   {name} = {}", short(value))),
            Some(old) if old != value => lines.push(format!(
                "changed {name}: {} -> {}",
                short(old),
                short(value)
            )),
            _ => {}
        }
    }
    for (name, value) in &old_map {
        if !new_map.contains_key(name) {
            lines.push(format!("removed {name} = {}", short(value)));
        }
    }
    // Include-dir entries repeat their name; compare them as a set as well.
    let dirs = |p: &Preimage| -> Vec<String> {
        p.0.iter()
            .filter(|(k, _)| k == "include dir")
            .map(|(_, v)| v.clone())
            .collect()
    };
    if dirs(old) != dirs(new) && !lines.iter().any(|l| l.contains("include dir")) {
        lines.push(format!(
            "changed include dirs: {:?} -> {:?}",
            dirs(old),
            dirs(new)
        ));
    }
    lines
}

fn short(value: &str) -> String {
    let one_line = value.lines().next().unwrap_or("");
    let cut: String = one_line.chars().take(70).collect();
    if cut.len() < one_line.len() || value.contains('\n') {
        format!("{cut}…")
    } else {
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ParamValue;

    fn fixture() -> (Toolchain, Kernel) {
        let mut components = Preimage::default();
        components.push("bin/nvcc", "1".repeat(64));
        components.push("include/", "2".repeat(64));
        let toolchain = Toolchain {
            nvcc: "/opt/cuda/bin/nvcc".into(),
            root: "/opt/cuda".into(),
            version_text: "Cuda compilation tools, release 13.0, V13.0.88\n".into(),
            release: "13.0.88".into(),
            fingerprint: "f".repeat(64),
            components,
            gpu_codes: vec!["sm_90".into()],
            packages: Vec::new(),
            libraries: Default::default(),
            unavailable_libraries: Default::default(),
        };
        let kernel = Kernel {
            name: "vadd".into(),
            dir: "kernels/vadd".into(),
            manifest: "kernels/vadd/kernel.toml".into(),
            sources: vec!["kernels/vadd/vadd.cu".into()],
            include: vec!["kernels/common".into()],
            entry: vec!["vadd".into()],
            templates: Default::default(),
            param_macros: Default::default(),
            libraries: Vec::new(),
            targets: vec![],
            flags: vec!["-O3".into(), "-lineinfo".into()],
            defines: [("USE_X".to_string(), ParamValue::Int(1))].into(),
            defined: Default::default(),
            define_params: Default::default(),
            prelude: None,
            ptx: false,
            params: BTreeMap::new(),
            exclude: vec![],
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
        };
        (toolchain, kernel)
    }

    fn key_of(toolchain: &Toolchain, kernel: &Kernel, config: &Config) -> String {
        let files: BTreeMap<String, String> = [
            ("kernels/vadd/vadd.cu".to_string(), "3".repeat(64)),
            ("kernels/common/util.h".to_string(), "4".repeat(64)),
        ]
        .into();
        let target = "sm_90".parse().unwrap();
        action_preimage(
            Path::new("/project"),
            toolchain,
            kernel,
            config,
            target,
            ArtifactKind::Cubin,
            &files,
        )
        .pipe(|p| action_key(&p.unwrap()))
    }

    /// A kernel that reached the key without the load-time check of its grid (a
    /// derived param that divides by zero): no key, an error naming the expression.
    #[test]
    fn a_derived_param_that_cannot_be_evaluated_is_an_error_not_a_missing_input() {
        let (toolchain, mut kernel) = fixture();
        kernel.params = [(
            "B".to_string(),
            vec![ParamValue::Int(0), ParamValue::Int(4)],
        )]
        .into();
        kernel.derived = vec![crate::project::grid::Derived {
            name: "PER".into(),
            expr: kart_runtime::expr::Expr::parse("64 / B").unwrap(),
        }];
        let config = Config::from([("B".to_string(), ParamValue::Int(0))]);
        let files = BTreeMap::new();
        let target = "sm_90".parse().unwrap();
        let err = action_preimage(
            Path::new("/project"),
            &toolchain,
            &kernel,
            &config,
            target,
            ArtifactKind::Cubin,
            &files,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("derived param `PER` cannot be evaluated"),
            "{text}"
        );
        assert!(
            kernel.configs().is_err(),
            "no grid without its derived params"
        );
        assert!(kernel.macro_params(&config).is_err());
    }

    trait Pipe: Sized {
        fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
            f(self)
        }
    }
    impl<T> Pipe for T {}

    /// Pins the encoding: if this fails, the key format changed, and
    /// KEY_FORMAT_VERSION must be bumped with it (and this constant updated).
    #[test]
    fn key_is_pinned() {
        let (toolchain, kernel) = fixture();
        let config = Config::from([("BLOCK".to_string(), ParamValue::Int(64))]);
        assert_eq!(
            key_of(&toolchain, &kernel, &config),
            "5faf5f6f689e7ad7b6193151d483396b757f5511a51c5b0561569ac32049d2d1"
        );
    }

    #[test]
    fn key_ignores_machine_specific_paths_and_sees_every_input() {
        let (toolchain, kernel) = fixture();
        let config = Config::from([("BLOCK".to_string(), ParamValue::Int(64))]);
        let base = key_of(&toolchain, &kernel, &config);

        let mut moved = toolchain.clone();
        moved.nvcc = "/elsewhere/bin/nvcc".into();
        moved.root = "/elsewhere".into();
        assert_eq!(key_of(&moved, &kernel, &config), base);

        let mut other = kernel.clone();
        other.flags.reverse();
        assert_ne!(key_of(&toolchain, &other, &config), base);
        let mut other = kernel.clone();
        other.defines.insert("USE_X".into(), ParamValue::Int(2));
        assert_ne!(key_of(&toolchain, &other, &config), base);
        let config2 = Config::from([("BLOCK".to_string(), ParamValue::Int(128))]);
        assert_ne!(key_of(&toolchain, &kernel, &config2), base);
        let mut tc = toolchain.clone();
        tc.components.0[1].1 = "5".repeat(64);
        assert_ne!(key_of(&tc, &kernel, &config), base);
    }

    #[test]
    fn diff_names_the_changed_input() {
        let mut a = Preimage::default();
        a.push("target", "sm_90");
        a.push("file k.cu", "1");
        let mut b = a.clone();
        b.0[1].1 = "2".into();
        b.push("file new.h", "3");
        let lines = diff_preimages(&a, &b);
        assert_eq!(
            lines,
            vec!["changed file k.cu: 1 -> 2", "added   file new.h = 3"]
        );
    }
}
