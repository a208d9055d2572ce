//! The expressions of a `kernel.toml`: `[derived]` params, `require` rules, the grid
//! they leave, `[tune]` and `default`, each error at the line and column of the
//! expression with what a config made of it.

use kart_runtime::error::{Error, Result};
use kart_runtime::expr::{Expr, ExprError, ExprErrorKind};
use kart_runtime::model::{Config, TuneSpec};
use kart_runtime::text::SourceFile;
use toml::Spanned;

use crate::project::grid::{Derived, GridError, GridReport, Rule, RuleOrDerived};
use crate::project::kernel::Kernel;
use crate::project::raw::{ManifestChecks, RawKernel};

/// `[tune]`: exact params mapped to problem keys, nearest keys, the program.
pub(super) fn tune_spec(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<Option<TuneSpec>> {
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
pub(super) fn expression(
    file: &SourceFile<'_>,
    text: &Spanned<String>,
    what: &str,
) -> Result<Expr> {
    Expr::parse(text.get_ref()).map_err(|e| expr_error(file, text, &e, what, None))
}

/// An expression error at its column inside the TOML string `text`.
pub(super) fn expr_error(
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
pub(super) fn known_names(
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
pub(super) fn derived(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
) -> Result<Vec<Derived>> {
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
pub(super) fn rules(file: &SourceFile<'_>, raw: &RawKernel, kernel: &Kernel) -> Result<Vec<Rule>> {
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

/// Every rule and derived param evaluates on every config `[[exclude]]` leaves; the
/// configs kept.
pub(super) fn check_grid(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
    collect: bool,
) -> Result<(GridReport, Option<Vec<Config>>)> {
    let walked = if collect {
        kernel.grid_report().map(|(r, c)| (r, Some(c)))
    } else {
        kernel.grid().check().map(|r| (r, None))
    };
    match walked {
        Ok(walked) => Ok(walked),
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
pub(super) fn default_config(
    file: &SourceFile<'_>,
    raw: &RawKernel,
    kernel: &Kernel,
    kept: usize,
    configs: Option<&[Config]>,
) -> Result<Option<Config>> {
    if kept == 0 {
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
            config.insert(k.get_ref(), file.value(v)?);
        }
        let in_grid = match configs {
            Some(configs) => configs.contains(&config),
            None => kernel.grid().keeps(&config),
        };
        if !in_grid {
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
