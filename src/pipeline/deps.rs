//! What a compile read: the dependency file nvcc writes, checked against the inputs of
//! the action key.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use crate::project::Kernel;
use crate::toolchain::Toolchain;

/// The prerequisites listed in a make-style dependency file.
pub fn parse_depfile(text: &str) -> Vec<PathBuf> {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut deps = Vec::new();
    for rule in joined.lines() {
        let Some((_, prereqs)) = rule.split_once(": ") else {
            continue;
        };
        let mut current = String::new();
        let mut chars = prereqs.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    current.push(' ');
                    chars.next();
                }
                c if c.is_whitespace() => {
                    if !current.is_empty() {
                        deps.push(PathBuf::from(std::mem::take(&mut current)));
                    }
                }
                c => current.push(c),
            }
        }
        if !current.is_empty() {
            deps.push(PathBuf::from(current));
        }
    }
    deps
}

/// Every file nvcc read must be an input of the key (one of the kernel's `sources`, a
/// file of a declared include folder or listed header library), part of the toolkit, or
/// a system header: otherwise a change to it
/// would not change the key and kart would serve a stale binary.
pub(crate) fn check_dependencies(
    root: &Path,
    toolchain: &Toolchain,
    kernel: &Kernel,
    deps: &[PathBuf],
) -> Result<(), String> {
    let mut canonical = Canonical::default();
    let toolkit = canonical.of(&toolchain.root);
    // Header libraries installed in kart's home lie outside the project.
    let installed_libraries: Vec<_> = toolchain
        .libraries
        .iter()
        .filter(|(_, pin)| pin.include.is_absolute())
        .map(|(name, pin)| (name, canonical.of(&pin.include), &pin.include))
        .collect();
    let mut problems = Vec::new();
    // Of an include folder that is another kernel's folder, only its `sources` are inputs
    // of the key (`key::include_inputs`); of any other, every file.
    let mut kernel_folders: Vec<(&Path, Vec<PathBuf>)> = Vec::new();
    for dir in &kernel.include {
        if root.join(dir).join(crate::project::KERNEL_FILE).is_file() {
            match crate::pipeline::key::include_inputs(root, dir) {
                Ok(sources) => kernel_folders.push((dir, sources)),
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    let in_include = |rel: &Path| {
        kernel.include.iter().any(|d| {
            rel.starts_with(d)
                && kernel_folders
                    .iter()
                    .find(|(folder, _)| folder == d)
                    .is_none_or(|(_, sources)| sources.iter().any(|s| s == rel))
        })
    };
    for dep in deps {
        let abs = canonical.of(&root.join(dep));
        if abs.starts_with(&toolkit) || abs.starts_with(&toolchain.root) {
            continue;
        }
        let outside_library = installed_libraries
            .iter()
            .find(|(_, dir, declared)| abs.starts_with(dir) || abs.starts_with(declared));
        if let Some((name, _, _)) = outside_library {
            if !kernel.libraries.contains(name) {
                problems.push(format!(
                    "`{}` is from the header library `{name}`, which the kernel does not list: add `libraries = [\"{name}\"]` to `{}`",
                    abs.display(),
                    kernel.manifest.display()
                ));
            }
            continue;
        }
        if let Ok(rel) = abs.strip_prefix(root) {
            let declared = kernel.sources.iter().any(|s| s == rel)
                || in_include(rel)
                || kernel.libraries.iter().any(|l| {
                    toolchain
                        .libraries
                        .get(l)
                        .is_some_and(|pin| rel.starts_with(&pin.include))
                });
            let other_library = toolchain
                .libraries
                .iter()
                .find(|(_, pin)| rel.starts_with(&pin.include));
            if let (false, Some((name, _))) = (declared, other_library) {
                problems.push(format!(
                    "`{}` is from the header library `{name}`, which the kernel does not list: add `libraries = [\"{name}\"]` to `{}`",
                    rel.display(),
                    kernel.manifest.display()
                ));
                continue;
            }
            if !declared && rel.starts_with(&kernel.dir) {
                let name = relative_path(&kernel.dir, rel);
                problems.push(format!(
                    "`{}` is read by the compile but is not one of the kernel's `sources`: add it to `sources` in `{}` (sources = [..., \"{}\"])",
                    rel.display(),
                    kernel.manifest.display(),
                    name.display()
                ));
                continue;
            }
            let kernel_folder = kernel_folders.iter().find(|(d, _)| rel.starts_with(d));
            if let (false, Some((folder, _))) = (declared, kernel_folder) {
                problems.push(format!(
                    "`{}` is read by the compile but is not one of the `sources` of `{}`, the kernel folder included by `{}`: of another kernel's folder only its `sources` are inputs; add the file to them, or move what both kernels share to a folder of headers and include that",
                    rel.display(),
                    folder.join(crate::project::KERNEL_FILE).display(),
                    kernel.manifest.display()
                ));
                continue;
            }
            if !declared {
                let folder = rel.parent().unwrap_or(Path::new(""));
                problems.push(format!(
                    "undeclared include `{}`: add its folder to `include` in `{}` (include = [\"{}\"])",
                    rel.display(),
                    kernel.manifest.display(),
                    relative_path(&kernel.dir, folder).display()
                ));
            }
        } else if !abs.starts_with("/usr/") {
            problems.push(format!(
                "undeclared include `{}`: it is outside the project, so it cannot be part of the key; \
                 copy it into a folder of the project and add that folder to `include` in `{}`",
                abs.display(),
                kernel.manifest.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The path from folder `from` to `to`, both relative to the same root.
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut p = PathBuf::new();
    for _ in common..from.len() {
        p.push("..");
    }
    for c in &to[common..] {
        p.push(c);
    }
    if p.as_os_str().is_empty() {
        p.push(".");
    }
    p
}

/// Paths with symlinks and `..` resolved, as [`std::fs::canonicalize`] gives them (a
/// path that cannot be resolved stays as it is). A compile's dependency file names a
/// hundred or so headers in a few folders: each folder is resolved once, and each file
/// only checked not to be a link itself (one `lstat` instead of a `readlink` per
/// component of a long toolkit path).
#[derive(Default)]
struct Canonical {
    folders: HashMap<PathBuf, PathBuf>,
}

impl Canonical {
    fn of(&mut self, path: &Path) -> PathBuf {
        let plain_name = matches!(path.components().next_back(), Some(Component::Normal(_)))
            && !path.as_os_str().as_encoded_bytes().ends_with(b"/.");
        let (Some(folder), Some(name), true) = (path.parent(), path.file_name(), plain_name) else {
            return std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        };
        if std::fs::symlink_metadata(path).map_or(true, |m| m.file_type().is_symlink()) {
            return std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        }
        let folder = self.folders.entry(folder.to_path_buf()).or_insert_with(|| {
            std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf())
        });
        folder.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_depfiles() {
        let text = "out.cubin : kernels/k/k.cu \\\n    /usr/include/stdio.h \\\n    kernels/my\\ dir/x.h\n";
        assert_eq!(
            parse_depfile(text),
            vec![
                PathBuf::from("kernels/k/k.cu"),
                PathBuf::from("/usr/include/stdio.h"),
                PathBuf::from("kernels/my dir/x.h")
            ]
        );
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(Path::new("kernels/k"), Path::new("kernels/common")),
            PathBuf::from("../common")
        );
        assert_eq!(
            relative_path(Path::new("kernels/k"), Path::new("kernels/k/inc")),
            PathBuf::from("inc")
        );
        assert_eq!(
            relative_path(Path::new("kernels/k"), Path::new("include")),
            PathBuf::from("../../include")
        );
    }

    #[test]
    fn paths_resolve_as_canonicalize_resolves_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::fs::write(root.join("real/sub/a.h"), "").unwrap();
        std::fs::write(root.join("elsewhere.h"), "").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("linked")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere.h"), root.join("real/sub/b.h")).unwrap();
        let mut canonical = Canonical::default();
        for path in [
            "real/sub/a.h",
            "linked/sub/a.h",
            "linked/sub/../sub/a.h",
            "real/sub/b.h",
            "linked/sub/b.h",
            "real/sub/.",
            "real/sub/..",
            "real/missing.h",
            "linked",
        ] {
            let path = root.join(path);
            let expected = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            assert_eq!(canonical.of(&path), expected, "{}", path.display());
        }
    }
}
