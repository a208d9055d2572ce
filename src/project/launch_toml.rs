//! `[launch]` and `[launch.args]` of a `kernel.toml`: grid, block and shared memory as
//! expressions, and how kart makes each argument of a call.

use std::collections::{BTreeMap, BTreeSet};

use kart_runtime::error::Result;
use kart_runtime::expr::Expr;
use kart_runtime::launch::LaunchSpec;
use kart_runtime::text::SourceFile;
use toml::Spanned;

use crate::project::grid_toml::expression;
use crate::project::kernel::Kernel;
use crate::project::raw::{ManifestChecks, RawKernel};

/// `[launch]`: 1 to 3 grid and block expressions, optional shared memory, and
/// `[launch.args]`, each name a param, a derived param, `SMS` or a problem key (of
/// `[tune]`, or of `problem = [...]`).
pub(super) fn launch(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<Option<LaunchSpec>> {
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
    let known = known_names(file, raw, kernel)?;
    let mut args = BTreeMap::new();
    for (entry, slots) in &l.args {
        let specs = launch_args(file, kernel, entry, slots)?;
        for (spec, slot) in specs.iter().zip(slots.get_ref()) {
            let exprs: Vec<&Expr> = match spec {
                crate::call::ArgSpec::Pass => Vec::new(),
                crate::call::ArgSpec::Value(e) => vec![e],
                crate::call::ArgSpec::TensorMap { shape, tile, .. } => {
                    shape.iter().chain(tile).collect()
                }
            };
            for e in exprs {
                check_names(file, e, slot.span(), false, &known)?;
            }
        }
        args.insert(entry.get_ref().clone(), specs);
    }
    let checked = |t: &Spanned<String>, what: &str| -> Result<Expr> {
        let e = expression(file, t, what)?;
        check_names(file, &e, t.span(), true, &known)?;
        Ok(e)
    };
    let list = |v: &Spanned<Vec<Spanned<String>>>, what: &str| -> Result<Vec<Expr>> {
        let exprs = list(v, what)?;
        for (e, t) in exprs.iter().zip(v.get_ref()) {
            check_names(file, e, t.span(), true, &known)?;
        }
        Ok(exprs)
    };
    Ok(Some(LaunchSpec {
        grid: list(&l.grid, "grid")?,
        block: list(&l.block, "block")?,
        shared_mem: l
            .shared_mem
            .as_ref()
            .map(|t| checked(t, "[launch] shared_mem"))
            .transpose()?,
        args,
    }))
}

/// The names a `[launch]` expression may use: params, derived params, `SMS` (the GPU's
/// multiprocessors, known at launch) and the problem's keys, which are `[tune]`'s
/// (`exact` values and `nearest`) and those `problem = [...]` lists.
fn known_names(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<BTreeSet<String>> {
    let mut known: BTreeSet<String> = kernel.params.keys().cloned().collect();
    known.extend(kernel.derived.iter().map(|d| d.name.clone()));
    known.insert("SMS".into());
    if let Some(tune) = &raw.tune {
        known.extend(tune.exact.values().map(|k| k.get_ref().clone()));
        known.extend(tune.nearest.iter().map(|k| k.get_ref().clone()));
    }
    for key in raw.launch.iter().flat_map(|l| &l.problem) {
        file.check_name(key.get_ref(), key.span(), "problem key")?;
        if kernel.params.contains_key(key.get_ref())
            || kernel.derived.iter().any(|d| d.name == *key.get_ref())
        {
            return Err(file.error(
                key.span(),
                format!("problem key `{}` is also a param of the kernel", key.get_ref()),
                "give the problem's key another name: a launch takes a param's value from the config",
            ));
        }
        known.insert(key.get_ref().clone());
    }
    Ok(known)
}

/// Refuses a name `e` uses that is not in `known`, at its column when `in_string` says
/// `span` is the expression's own TOML string (else at `span`).
fn check_names(
    file: &SourceFile<'_>,
    e: &Expr,
    span: std::ops::Range<usize>,
    in_string: bool,
    known: &BTreeSet<String>,
) -> Result<()> {
    for (name, at) in e.names() {
        if known.contains(name) {
            continue;
        }
        let start = if in_string {
            span.start + 1 + at.start
        } else {
            span.start
        };
        let guess = crate::suggest::did_you_mean(name, known.iter().map(String::as_str))
            .map(|g| format!("{g} "))
            .unwrap_or_default();
        return Err(file.error(
            start..start,
            format!(
                "[launch] `{}` uses `{name}`, which is neither a param, a derived param, `SMS` nor a problem key",
                e.text
            ),
            format!(
                "{guess}problem keys are those of [tune] (`exact` values and `nearest`); a kernel without [tune] lists them in [launch]: problem = [\"{name}\"]"
            ),
        ));
    }
    Ok(())
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
