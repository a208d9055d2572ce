//! `[launch]` and `[launch.args]` of a `kernel.toml`: grid, block, shared memory,
//! cluster and launch attributes as expressions, and how kart makes each argument of a
//! call.

use std::collections::{BTreeMap, BTreeSet};

use kart_runtime::error::Result;
use kart_runtime::expr::{Expr, Layered};
use kart_runtime::launch::LaunchSpec;
use kart_runtime::model::Config;
use kart_runtime::text::SourceFile;
use toml::Spanned;

use crate::project::grid_toml::expression;
use crate::project::kernel::Kernel;
use crate::project::raw::{ManifestChecks, RawKernel};

/// `[launch]`: 1 to 3 grid and block expressions, optional shared memory, an optional
/// cluster (1 to 3) and `pdl`, and `[launch.args]`, each name a param, a derived
/// param, `SMS` or a problem key (of `[tune]`, or of `problem = [...]`).
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
                crate::call::ArgSpec::TensorMap {
                    shape,
                    tile,
                    swizzle,
                    l2_promotion,
                    ..
                } => shape
                    .iter()
                    .chain(tile)
                    .chain(std::iter::once(swizzle))
                    .chain(l2_promotion)
                    .collect(),
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
    let cluster = match &l.cluster {
        None => Vec::new(),
        Some(v) => {
            if v.get_ref().is_empty() || v.get_ref().len() > 3 {
                return Err(file.error(
                    v.span(),
                    "[launch] cluster takes 1 to 3 expressions (x, y, z)",
                    "for example cluster = [\"CLUSTER\", 1, 1]: blocks per cluster in x, y and z",
                ));
            }
            hopper_only(file, kernel, v.span(), "cluster", "thread-block clusters")?;
            v.get_ref()
                .iter()
                .enumerate()
                .map(|(i, slot)| number(file, slot, &format!("[launch] cluster[{i}]"), &known))
                .collect::<Result<Vec<_>>>()?
        }
    };
    let pdl = match &l.pdl {
        None => None,
        Some(v) if matches!(v.get_ref(), toml::Value::Boolean(false)) => None,
        Some(v) => {
            hopper_only(
                file,
                kernel,
                v.span(),
                "pdl",
                "programmatic dependent launch",
            )?;
            match v.get_ref() {
                toml::Value::Boolean(_) => Some(Expr::parse("1").map_err(|e| {
                    file.error(v.span(), format!("[launch] pdl: {}", e.message), "")
                })?),
                _ => Some(number(file, v, "[launch] pdl", &known)?),
            }
        }
    };
    Ok(Some(LaunchSpec {
        grid: list(&l.grid, "grid")?,
        block: list(&l.block, "block")?,
        shared_mem: l
            .shared_mem
            .as_ref()
            .map(|t| checked(t, "[launch] shared_mem"))
            .transpose()?,
        cluster,
        pdl,
        args,
    }))
}

/// Refuses `key` of `[launch]` when a target of the kernel is older than sm_90, where
/// `feature` does not exist.
fn hopper_only(
    file: &SourceFile<'_>,
    kernel: &Kernel,
    span: std::ops::Range<usize>,
    key: &str,
    feature: &str,
) -> Result<()> {
    match kernel.targets.iter().find(|t| t.major < 9) {
        None => Ok(()),
        Some(t) => Err(file.error(
            span,
            format!(
                "[launch] {key}: {feature} need compute capability 9.0 or later, but `targets` lists {t}"
            ),
            format!(
                "remove {t} from `targets`, or give the {t} build its own kernel without `{key}` (a `variant_of` of this one)"
            ),
        )),
    }
}

/// An integer or an expression (a string) of `[launch]`, its names checked.
fn number(
    file: &SourceFile<'_>,
    value: &Spanned<toml::Value>,
    what: &str,
    known: &BTreeSet<String>,
) -> Result<Expr> {
    match value.get_ref() {
        toml::Value::String(t) => {
            let text = Spanned::new(value.span(), t.clone());
            let e = expression(file, &text, what)?;
            check_names(file, &e, value.span(), true, known)?;
            Ok(e)
        }
        toml::Value::Integer(i) => Expr::parse(&i.to_string())
            .map_err(|e| file.error(value.span(), format!("{what}: {}", e.message), "")),
        other => Err(file.error(
            value.span(),
            format!("{what} must be an expression (a string) or an integer, not `{other}`"),
            "for example \"CLUSTER\" or 2",
        )),
    }
}

/// Evaluates, for every config of the grid, each number of `[launch]` and
/// `[launch.args]` whose legal values are known before a launch (cluster sides, `pdl`,
/// a tensor map's `swizzle` and `l2_promotion`) and names only params and derived
/// params: an illegal value is an error at its line naming the config, not a failed
/// launch.
pub(super) fn check_configs(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
    configs: &[Config],
) -> Result<()> {
    use crate::call::{ArgSpec, L2_PROMOTIONS, SWIZZLES};
    let (Some(l), Some(spec)) = (&raw.launch, &kernel.launch) else {
        return Ok(());
    };
    struct Check<'a> {
        expr: &'a Expr,
        span: std::ops::Range<usize>,
        what: String,
        legal: Option<&'static [i64]>,
        min: i64,
    }
    let mut checks = Vec::new();
    if let Some(v) = &l.cluster {
        for (i, (e, slot)) in spec.cluster.iter().zip(v.get_ref()).enumerate() {
            checks.push(Check {
                expr: e,
                span: slot.span(),
                what: format!("[launch] cluster[{i}]"),
                legal: None,
                min: 1,
            });
        }
    }
    if let (Some(e), Some(v)) = (&spec.pdl, &l.pdl) {
        checks.push(Check {
            expr: e,
            span: v.span(),
            what: "[launch] pdl".into(),
            legal: None,
            min: 0,
        });
    }
    for (entry, specs) in &spec.args {
        let Some((_, slots)) = l.args.iter().find(|(k, _)| k.get_ref() == entry) else {
            continue;
        };
        for (i, (a, slot)) in specs.iter().zip(slots.get_ref()).enumerate() {
            if let ArgSpec::TensorMap {
                swizzle,
                l2_promotion,
                ..
            } = a
            {
                checks.push(Check {
                    expr: swizzle,
                    span: slot.span(),
                    what: format!("[launch.args] {entry} parameter {i} swizzle"),
                    legal: Some(&SWIZZLES),
                    min: 0,
                });
                if let Some(e) = l2_promotion {
                    checks.push(Check {
                        expr: e,
                        span: slot.span(),
                        what: format!("[launch.args] {entry} parameter {i} l2_promotion"),
                        legal: Some(&L2_PROMOTIONS),
                        min: 0,
                    });
                }
            }
        }
    }
    let config_names = |e: &Expr| {
        e.names().iter().all(|(n, _)| {
            kernel.params.contains_key(*n) || kernel.derived.iter().any(|d| d.name == *n)
        })
    };
    checks.retain(|c| config_names(c.expr));
    if checks.is_empty() {
        return Ok(());
    }
    for config in configs {
        let derived = kernel.derived_or_error(config)?;
        let env = Layered(config, &derived);
        for c in &checks {
            let on = if c.expr.names().is_empty() {
                String::new()
            } else {
                format!(" for config {config}")
            };
            let value = c.expr.evaluate(&env).map_err(|e| {
                file.error(
                    c.span.clone(),
                    format!(
                        "kernel `{}`: {} = \"{}\"{on}: {e}",
                        kernel.name, c.what, c.expr.text
                    ),
                    "guard the expression, or add a `require` rule that removes such configs",
                )
            })?;
            let bad = match c.legal {
                Some(legal) => (!legal.contains(&value)).then(|| {
                    format!(
                        "not a legal value (one of {} bytes)",
                        legal
                            .iter()
                            .map(i64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
                None => (value < c.min || value > i64::from(u32::MAX))
                    .then(|| format!("outside {} to 2^32 - 1", c.min)),
            };
            if let Some(why) = bad {
                return Err(file.error(
                    c.span.clone(),
                    format!(
                        "kernel `{}`: {} = \"{}\" is {value}{on}, {why}",
                        kernel.name, c.what, c.expr.text
                    ),
                    "make the expression give a legal value for every config, or add a `require` rule that removes such configs",
                ));
            }
        }
    }
    Ok(())
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

const ARGS_HINT: &str = "each parameter is \"pass\" (the caller's argument), { value = \"EXPR\" } (an integer kart computes), or { tensormap = \"f16\", shape = [...], tile = [...], swizzle = 128 } (a tensor map kart makes over the caller's pointer; swizzle and l2_promotion take bytes or an expression)";

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
                let known = [
                    "value",
                    "tensormap",
                    "shape",
                    "tile",
                    "swizzle",
                    "l2_promotion",
                ];
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
                        // An integer must be legal as written; an expression is checked
                        // per config (names of the config only) or per launch.
                        let bytes = |what: &str, legal: &[i64], default: i64| -> Result<Expr> {
                            match t.get(what) {
                                None => expr_at(slot, &format!("{at} {what}"), &toml::Value::Integer(default)),
                                Some(toml::Value::Integer(b)) if !legal.contains(b) => Err(bad(format!(
                                    "`{what}` is {b}, not one of {} (bytes)",
                                    legal.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                                ))),
                                Some(v) => expr_at(slot, &format!("{at} {what}"), v),
                            }
                        };
                        let swizzle = bytes("swizzle", &crate::call::SWIZZLES, 0)?;
                        let l2_promotion = match t.get("l2_promotion") {
                            None => None,
                            Some(_) => Some(bytes("l2_promotion", &crate::call::L2_PROMOTIONS, 128)?),
                        };
                        ArgSpec::TensorMap {
                            dtype: dtype.clone(),
                            shape,
                            tile,
                            swizzle,
                            l2_promotion,
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
