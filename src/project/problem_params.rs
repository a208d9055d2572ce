//! Params whose values come from a workload rather than from kernel.toml:
//! `[problem_params]` binds a param to a problem key (`N = "N"`), so a shape-specialized
//! kernel is built for exactly the shapes of a problems file or a trace
//! (`kart build --problems FILE` / `--trace FILE`); and `launch_params`, params that
//! change only the launch, so configs that differ only in them share one compile.

use std::collections::{BTreeMap, BTreeSet};

use kart_runtime::error::{Error, Result};
use kart_runtime::model::{ParamValue, Problem};
use kart_runtime::text::SourceFile;

use crate::project::Project;
use crate::project::kernel::{Kernel, ParamMacros};
use crate::project::raw::{ManifestChecks, RawKernel};

/// `[problem_params]`: param → the problem key whose values it takes. Each param is a C
/// identifier that `[params]` and `defines` do not also name; the key is a name.
pub(super) fn problem_params(
    file: &SourceFile<'_>,
    raw: &RawKernel,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (param, key) in &raw.problem_params {
        file.check_name(param.get_ref(), param.span(), "param")?;
        if raw.params.keys().any(|k| k.get_ref() == param.get_ref()) {
            return Err(file.error(
                param.span(),
                format!(
                    "`{}` is in both `[params]` and `[problem_params]`",
                    param.get_ref()
                ),
                "a problem param takes its values from the problems: remove its `[params]` list",
            ));
        }
        if raw.defines.keys().any(|d| d.get_ref() == param.get_ref()) {
            return Err(file.error(
                param.span(),
                format!("`{}` is both a problem param and a define", param.get_ref()),
                "keep it in one of `[problem_params]` or `defines`",
            ));
        }
        file.check_name(key.get_ref(), key.span(), "problem key")?;
        out.insert(param.get_ref().clone(), key.get_ref().clone());
    }
    if !out.is_empty()
        && let Some(d) = &raw.default
    {
        return Err(file.error(
            d.span(),
            "a kernel with `[problem_params]` has no `default`: its configs depend on the problems it is built for",
            "remove `default`",
        ));
    }
    Ok(out)
}

/// `launch_params`: params that change only the launch (a block size the kernel reads
/// from `blockDim`). Each must be a param that reaches no compile input (see
/// [`reaches_compile`]). Returns the declared ones, and the params found to reach no
/// compile input though not declared (treated the same: left out of the key).
pub(super) fn launch_params(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<(BTreeSet<String>, BTreeSet<String>)> {
    let mut out = BTreeSet::new();
    for name in &raw.launch_params {
        let param = name.get_ref();
        let refuse = |why: String, hint: &str| {
            Err(file.error(
                name.span(),
                format!("launch-only param `{param}` {why}"),
                hint.to_string(),
            ))
        };
        if !kernel.params.contains_key(param) {
            return refuse(
                "is not a param".into(),
                "declare it in [params]: `THREADS = [64, 128, 256]`",
            );
        }
        if !out.insert(param.clone()) {
            return refuse("is listed twice".into(), "remove the repeated name");
        }
        if let Some((why, hint)) = reaches_compile(kernel, param) {
            return refuse(why, hint);
        }
    }
    let found = kernel
        .params
        .keys()
        .filter(|p| !out.contains(*p) && reaches_compile(kernel, p).is_none())
        .cloned()
        .collect();
    Ok((out, found))
}

/// Why `param` reaches a compile input, with what to do, if it does: a problem param,
/// a template argument, used by `[derived]`, a define param, or a `-D` macro (under
/// `param_macros = "all"`, or under `"auto"` when the sources or include folders
/// mention it).
fn reaches_compile(kernel: &Kernel, param: &str) -> Option<(String, &'static str)> {
    if kernel.problem_params.contains_key(param) {
        return Some((
            "is a problem param".into(),
            "a problem param specializes the compile; remove it from `launch_params`",
        ));
    }
    if let Some(t) = kernel
        .templates
        .values()
        .find(|t| !t.uses([param]).is_empty())
    {
        return Some((
            format!(
                "is a template argument of `{}`, so it reaches the compile",
                t.name
            ),
            "remove it from `launch_params`, or from the entry's arguments",
        ));
    }
    if let Some(d) = kernel
        .derived
        .iter()
        .find(|d| d.expr.names().into_iter().any(|(n, _)| n == param))
    {
        return Some((
            format!(
                "is used by the derived param `{}`, whose value reaches the compile",
                d.name
            ),
            "remove it from `launch_params`, or compute the launch value in [launch] instead",
        ));
    }
    if kernel.define_params.contains(param) {
        return Some((
            "is a define param (it chooses a macro)".into(),
            "remove it from `launch_params` or from `define_params`",
        ));
    }
    if kernel.param_macros == ParamMacros::All {
        return Some((
            "would be passed as a -D macro (`param_macros = \"all\"`)".into(),
            "use `param_macros = \"auto\"`, or remove it from `launch_params`",
        ));
    }
    if kernel.param_macros == ParamMacros::Auto && !kernel.unmentioned.contains(param) {
        return Some((
            "is mentioned by the kernel's sources or include folders, so it is passed as a -D macro".into(),
            "read the value at run time (blockDim) and remove the name from the sources, or remove it from `launch_params`",
        ));
    }
    None
}

/// What binding a project's problem params to problems did, per kernel.
#[derive(Clone, Debug, Default)]
pub struct Bound {
    /// One line per kernel with problem params: the values each took, or why none.
    pub notes: Vec<String>,
}

impl Project {
    /// Gives every problem param its values from `problems` (per kernel family base:
    /// the problems a kernel and its variants share). `None`: no problems were given,
    /// and each such param keeps no value, so its kernel has no config. A problem of
    /// such a kernel without the bound key is an error naming the problem and `source`
    /// (the file). With several problem params, a config takes the combinations of
    /// values that some problem has, not their cross product.
    pub fn bind_problems(
        &mut self,
        problems: Option<&BTreeMap<String, BTreeSet<Problem>>>,
        source: &str,
    ) -> Result<Bound> {
        let mut bound = Bound::default();
        let bases: Vec<String> = self
            .kernels
            .iter()
            .map(|k| {
                k.variant_of
                    .as_ref()
                    .map_or_else(|| k.name.clone(), |v| v.base.clone())
            })
            .collect();
        for (kernel, base) in self.kernels.iter_mut().zip(bases) {
            if kernel.problem_params.is_empty() {
                continue;
            }
            let bindings: Vec<String> = kernel
                .problem_params
                .iter()
                .map(|(p, k)| format!("{p} = \"{k}\""))
                .collect();
            let Some(problems) = problems else {
                bound.notes.push(format!(
                    "kernel `{}` builds nothing: its [problem_params] ({}) take their values from problems; pass `kart build --problems FILE` or `--trace FILE`",
                    kernel.name,
                    bindings.join(", ")
                ));
                continue;
            };
            let mut combos: BTreeSet<BTreeMap<String, ParamValue>> = BTreeSet::new();
            for problem in problems.get(&base).into_iter().flatten() {
                let mut combo = BTreeMap::new();
                for (param, key) in &kernel.problem_params {
                    let Some(v) = problem.get(key) else {
                        return Err(Error::usage(
                            format!(
                                "{source}: a problem of kernel `{base}` ({}) has no key `{key}`, which `{}` binds `{param}` to",
                                show(problem),
                                kernel.manifest.display()
                            ),
                            Some(format!(
                                "give every problem of `{base}` the key `{key}`, or bind `{param}` to a key the problems have"
                            )),
                        ));
                    };
                    combo.insert(param.clone(), ParamValue::Int(*v));
                }
                combos.insert(combo);
            }
            for param in kernel.problem_params.keys() {
                let values: BTreeSet<&ParamValue> = combos.iter().map(|c| &c[param]).collect();
                kernel
                    .params
                    .insert(param.clone(), values.into_iter().cloned().collect());
            }
            kernel.problem_combos = if kernel.problem_params.len() > 1 {
                combos.iter().cloned().collect()
            } else {
                Vec::new()
            };
            kernel.kept = Default::default();
            let configs = kernel.configs()?.len();
            bound.notes.push(if combos.is_empty() {
                format!(
                    "kernel `{}` builds nothing: {source} has no problem of `{base}`",
                    kernel.name
                )
            } else {
                let shown: Vec<String> = combos
                    .iter()
                    .map(|c| {
                        let parts: Vec<String> =
                            c.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        parts.join(",")
                    })
                    .collect();
                format!(
                    "kernel `{}`: {} problem value(s) from {source} ({}), {configs} config(s) after the grid's rules",
                    kernel.name,
                    combos.len(),
                    shown.join(" ")
                )
            });
        }
        Ok(bound)
    }
}

fn show(problem: &Problem) -> String {
    let parts: Vec<String> = problem.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(", ")
}
