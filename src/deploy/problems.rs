//! The problems a workload runs, from the two files that say so: a problems file
//! (`[[problem]]` tables, written by hand) and a trace (`KART_TRACE`, written by the
//! runtime). One reader for every command that takes `--problems` or `--trace`:
//! `kart coverage`, `kart bundle` and `kart build`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kart_runtime::model::Problem;
use kart_runtime::trace::TraceRecord;

use crate::error::{Error, Result};
use crate::project::Project;

/// Problems per kernel (family base).
pub type Problems = BTreeMap<String, BTreeSet<Problem>>;

/// A trace written by the runtime; one without a record is an error (the workload did
/// not run with `KART_TRACE` set to it).
pub fn read_trace(path: &Path) -> Result<Vec<TraceRecord>> {
    let trace = kart_runtime::trace::read(path)?;
    if trace.is_empty() {
        return Err(Error::usage(
            format!("the trace `{}` has no record", path.display()),
            Some("run the workload with KART_TRACE set to that file first".into()),
        ));
    }
    Ok(trace)
}

/// The problems of `--problems FILE` and `--trace FILE` together (`None` when neither
/// is given), and the files they came from, for messages.
pub fn load(
    project: &Project,
    problems: Option<&Path>,
    trace: Option<&Path>,
) -> Result<Option<(Problems, String)>> {
    let mut out: Problems = BTreeMap::new();
    let mut from = Vec::new();
    if let Some(path) = problems {
        out = read_problems(path, path)?;
        from.push(path.display().to_string());
    }
    if let Some(path) = trace {
        for (kernel, traced) in problems_of_trace(project, &read_trace(path)?) {
            out.entry(kernel).or_default().extend(traced);
        }
        from.push(path.display().to_string());
    }
    if from.is_empty() {
        return Ok(None);
    }
    Ok(Some((out, from.join(" and "))))
}

/// The problems a trace met, per kernel family base: launches that named a problem
/// and `best()` answers that fell back.
pub fn problems_of_trace(
    project: &Project,
    trace: &[TraceRecord],
) -> BTreeMap<String, BTreeSet<Problem>> {
    let mut out: BTreeMap<String, BTreeSet<Problem>> = BTreeMap::new();
    for r in trace {
        let (kernel, problem) = match r {
            TraceRecord::Launch {
                kernel,
                problem: Some(problem),
                ..
            } => (kernel, problem),
            TraceRecord::Fallback {
                kernel, problem, ..
            } => (kernel, problem),
            TraceRecord::Launch { problem: None, .. } => continue,
        };
        let base = project
            .kernels
            .iter()
            .find(|k| &k.name == kernel)
            .and_then(|k| k.variant_of.as_ref().map(|v| v.base.clone()))
            .unwrap_or_else(|| kernel.clone());
        out.entry(base).or_default().insert(problem.clone());
    }
    out
}

/// Reads a problems file: `[[problem]]` tables, each a `kernel` and the problem's
/// integer keys (`[tune]`'s problem keys of that kernel).
///
/// ```toml
/// [[problem]]
/// kernel = "flash_attn"
/// B = 4
/// H = 16
/// S = 4096
/// D = 128
/// ```
pub fn read_problems(
    path: &std::path::Path,
    shown: &std::path::Path,
) -> crate::error::Result<BTreeMap<String, BTreeSet<Problem>>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        problem: Vec<toml::Spanned<BTreeMap<String, toml::Spanned<toml::Value>>>>,
    }
    let text = kart_runtime::text::read_text(path, kart_runtime::text::Limit::MANIFEST)?;
    let file = kart_runtime::text::SourceFile {
        path: shown.to_path_buf(),
        text: &text,
    };
    let parsed: File = file.parse()?;
    let mut out: BTreeMap<String, BTreeSet<Problem>> = BTreeMap::new();
    for table in &parsed.problem {
        let mut kernel = None;
        let mut problem = Problem::new();
        for (key, value) in table.get_ref() {
            match (key.as_str(), value.get_ref()) {
                ("kernel", toml::Value::String(name)) => {
                    kart_runtime::untrusted::identifier("kernel", name).map_err(|e| {
                        file.error(value.span(), e, "the kernel's name, as in kernel.toml")
                    })?;
                    kernel = Some(name.clone());
                }
                (name, toml::Value::Integer(v)) => {
                    kart_runtime::untrusted::identifier("problem key", name).map_err(|e| {
                        file.error(value.span(), e, "problem keys are names like `M` or `SEQ`")
                    })?;
                    problem.insert(name.to_string(), *v);
                }
                (name, _) => {
                    return Err(file.error(
                        value.span(),
                        format!("`{name}` must be an integer (or `kernel`, a string)"),
                        "a problem is a kernel's name and integer keys: `M = 4096`",
                    ));
                }
            }
        }
        let Some(kernel) = kernel else {
            return Err(file.error(
                table.span(),
                "a `[[problem]]` without `kernel`",
                "add `kernel = \"NAME\"`",
            ));
        };
        out.entry(kernel).or_default().insert(problem);
    }
    Ok(out)
}
