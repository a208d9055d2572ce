//! Where a compile's files are in an action and back: the arguments rewritten to the
//! input root's layout (the project's files under [`WORK_DIR`], the compile's own under
//! [`SCRATCH_DIR`], header libraries under [`LIBRARY_DIR`], the toolkit under
//! [`TOOLCHAIN_DIR`]), and what a worker sends back (a dependency file, messages) with
//! its paths turned into this machine's, so the compile's checks read it as a local
//! run's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::pipeline::compile::{CompileJob, Run};

/// The working folder of every action: the project's files at their relative paths.
pub const WORK_DIR: &str = "src";
/// The toolkit's folder in the input root.
pub const TOOLCHAIN_DIR: &str = "toolchain";
/// The folder of header libraries installed outside the project.
pub const LIBRARY_DIR: &str = "lib";
/// The compile's own files (generated inputs, outputs), inside [`WORK_DIR`].
pub const SCRATCH_DIR: &str = ".kart-action";
/// The Command's platform property naming the toolchain (its fingerprint).
pub const TOOLCHAIN_PROPERTY: &str = "kart-toolchain";
/// The `PATH` of every action: nvcc runs the host's C++ compiler for preprocessing.
pub const ACTION_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `path` relative to `scratch` (`/`-separated), if inside it.
pub(super) fn scratch_relative(scratch: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(scratch).ok()?;
    let text = rel.to_str()?.replace('\\', "/");
    (!text.is_empty()).then_some(text)
}

/// The arguments of `run` as the action passes them: files of the scratch folder under
/// [`SCRATCH_DIR`], header libraries installed outside the project under
/// [`LIBRARY_DIR`]. `None` when the compile must run here: its bytes depend on its
/// folder (line information), or an argument names an absolute path kart cannot map
/// (such as `--time`'s table).
pub(super) fn remote_args(job: &CompileJob<'_>, run: &Run<'_>) -> Option<Vec<String>> {
    if job.kernel.line_info_flag().is_some() {
        return None;
    }
    let libraries: BTreeMap<String, String> = job
        .kernel
        .libraries
        .iter()
        .filter_map(|name| {
            let pin = job.toolchain.libraries.get(name)?;
            pin.include.is_absolute().then(|| {
                (
                    pin.include.display().to_string(),
                    format!("../{LIBRARY_DIR}/{name}"),
                )
            })
        })
        .collect();
    let scratch = run.scratch.display().to_string();
    let mut out = Vec::with_capacity(run.args.len());
    for arg in run.args {
        let mapped =
            if let Some(rest) = arg.strip_prefix(&scratch).and_then(|r| r.strip_prefix('/')) {
                format!("{SCRATCH_DIR}/{rest}")
            } else if let Some(lib) = libraries.get(arg) {
                lib.clone()
            } else {
                arg.clone()
            };
        if mapped.starts_with('/') || mapped.contains(&scratch) {
            return None;
        }
        out.push(mapped);
    }
    Some(out)
}

/// The project's files a compile of `job` may read, as (path relative to the project
/// root, path here): the kernel's sources, the files of its include folders (as the
/// action key lists them: `key::kernel_input_files`), and the files of the header
/// libraries it lists that live inside the project.
pub(super) fn project_inputs(job: &CompileJob<'_>) -> Result<Vec<(String, PathBuf)>, String> {
    let mut files = BTreeMap::new();
    let kernel_toml = job.kernel.dir.join(crate::project::KERNEL_FILE);
    for path in &job.kernel.sources {
        let rel = path.to_string_lossy().replace('\\', "/");
        files.insert(rel, job.root.join(path));
    }
    let mut folders: Vec<(&Path, bool)> = job
        .kernel
        .include
        .iter()
        .map(|d| (d.as_path(), true))
        .collect();
    for name in &job.kernel.libraries {
        if let Some(pin) = job.toolchain.libraries.get(name)
            && !pin.include.is_absolute()
        {
            folders.push((pin.include.as_path(), false));
        }
    }
    for (dir, is_include) in folders {
        let mut rel = Vec::new();
        crate::tree::collect_files(&job.root.join(dir), &job.root.join(dir), &mut rel)
            .map_err(|e| e.with_causes())?;
        for r in rel {
            let path = dir.join(&r);
            let hidden = r.split('/').any(|c| c.starts_with('.'));
            if is_include && (path == kernel_toml || hidden) {
                continue;
            }
            let name = path.to_string_lossy().replace('\\', "/");
            files.entry(name).or_insert_with(|| job.root.join(&path));
        }
    }
    Ok(files.into_iter().collect())
}

/// The places an action's paths point to here: the scratch folder, the toolkit, each
/// header library installed outside the project (longest first).
pub(super) fn path_map(job: &CompileJob<'_>, scratch: &Path) -> Vec<(String, String)> {
    let mut map = vec![
        (format!("{SCRATCH_DIR}/"), format!("{}/", scratch.display())),
        (
            format!("../{TOOLCHAIN_DIR}/"),
            format!("{}/", job.toolchain.root.display()),
        ),
    ];
    for name in &job.kernel.libraries {
        if let Some(pin) = job.toolchain.libraries.get(name)
            && pin.include.is_absolute()
        {
            map.push((
                format!("../{LIBRARY_DIR}/{name}/"),
                format!("{}/", pin.include.display()),
            ));
        }
    }
    map.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    map
}

/// An action's dependency file with its paths as a local run writes them, so the
/// compile's check of what nvcc read is the same (spaces escaped as make does). Paths
/// relative to the working folder map by prefix; an absolute path under the folder the
/// worker laid the input root out in (nvcc names the toolkit's headers after the path
/// it was run by: `/…/toolchain/bin/..//include/…`, `/…/toolchain/include/cccl/…`) maps
/// by the part after the input root's `toolchain/` or `lib/<name>/`, when that file
/// exists here.
pub(super) fn local_depfile(job: &CompileJob<'_>, scratch: &Path, text: &str) -> String {
    let map = path_map(job, scratch);
    let escape = |s: &str| s.replace(' ', "\\ ");
    let flush = |word: &mut String, out: &mut String| {
        if let Some((from, to)) = map.iter().find(|(from, _)| word.starts_with(from.as_str())) {
            out.push_str(&escape(to));
            out.push_str(&word[from.len()..]);
        } else if let Some(local) = word
            .starts_with('/')
            .then(|| worker_path(&map, &word.replace("\\ ", " ")))
            .flatten()
        {
            out.push_str(&escape(&local));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&' ') {
            word.push(c);
            word.push(' ');
            chars.next();
        } else if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The local path of `path`, an absolute path in the worker's copy of the input root:
/// the first `/toolchain/` or `/lib/<name>/` in it whose rest names a file here.
pub(super) fn worker_path(map: &[(String, String)], path: &str) -> Option<String> {
    map.iter()
        .filter_map(|(from, to)| Some((from.strip_prefix("../")?, to)))
        .find_map(|(marker, to)| {
            let at = path.find(&format!("/{marker}"))?;
            let local = format!("{to}{}", &path[at + 1 + marker.len()..]);
            Path::new(&local).exists().then_some(local)
        })
}

/// An action's stdout or stderr with its paths as a local run prints them.
pub(super) fn local_text(job: &CompileJob<'_>, scratch: &Path, text: &str) -> String {
    let mut out = text.to_string();
    for (from, to) in path_map(job, scratch) {
        out = out.replace(&from, &to);
    }
    out
}
