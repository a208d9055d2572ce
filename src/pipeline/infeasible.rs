//! Configs that ptxas refuses for a resource limit (more static shared memory or
//! parameter space than the target has): not a bug to show a thousand times, but a
//! corner of the grid to exclude. Each such failure is grouped by its limit, shown
//! once, and answered with a `require` rule that excludes exactly those configs.

use std::collections::BTreeSet;

use crate::model::{Config, ParamValue};

/// What every infeasible failure's group starts with.
pub const GROUP: &str = "infeasible: ";

/// A resource limit ptxas reported: what ran out, and the limit, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// `shared data`, `parameter space`, …
    pub resource: String,
    /// The target's limit in bytes.
    pub max: u64,
}

impl Limit {
    /// The failure's one-line summary (ptxas's own line stays in the details, shown
    /// once).
    pub fn summary(&self, target: &str) -> String {
        format!(
            "infeasible on {target}: needs more {} than its limit of {} bytes",
            self.resource, self.max
        )
    }

    /// The group every config over this limit shares, so it is shown once.
    pub fn group(&self, target: &str) -> String {
        format!(
            "{GROUP}{} over {} bytes on {target}",
            self.resource, self.max
        )
    }
}

/// The resource limit ptxas's output reports, if that is why it failed:
/// `… uses too much shared data (0x10000 bytes, 0xc000 max)`.
pub fn limit(ptxas_output: &str) -> Option<Limit> {
    ptxas_output.lines().find_map(|line| {
        let (_, rest) = line.split_once(" uses too much ")?;
        let (resource, numbers) = rest.split_once(" (")?;
        let (_, max) = numbers.split_once(", ")?;
        let max = max.strip_suffix(" max)")?.trim();
        let max = u64::from_str_radix(max.strip_prefix("0x")?, 16).ok()?;
        Some(Limit {
            resource: resource.trim().to_string(),
            max,
        })
    })
}

/// A `require` rule that holds for every config of `all` but those of `failing`: a bound
/// on one integer param, else on the product of two, else one that lists the failing
/// configs. `None` when `failing` is empty.
pub fn require_rule(all: &[&Config], failing: &BTreeSet<&Config>) -> Option<String> {
    if failing.is_empty() {
        return None;
    }
    let ints = |c: &Config, name: &str| match c.get(name) {
        Some(ParamValue::Int(v)) => Some(*v),
        _ => None,
    };
    let names: Vec<&str> = all.first()?.keys().collect();
    // The smallest value among the failing configs, if every config from it up fails.
    let bound = |value: &dyn Fn(&Config) -> Option<i64>| -> Option<i64> {
        let t = failing
            .iter()
            .map(|c| value(c))
            .collect::<Option<Vec<_>>>()?;
        let t = *t.iter().min()?;
        let exact = all
            .iter()
            .all(|c| value(c).is_some_and(|v| (v >= t) == failing.contains(c)));
        exact.then_some(t)
    };
    for name in &names {
        if let Some(t) = bound(&|c| ints(c, name)) {
            return Some(format!("{name} < {t}"));
        }
    }
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let product = |c: &Config| ints(c, a)?.checked_mul(ints(c, b)?);
            if let Some(t) = bound(&product) {
                return Some(format!("{a} * {b} < {t}"));
            }
        }
    }
    let each: Vec<String> = failing
        .iter()
        .map(|c| {
            let terms: Vec<String> = c.iter().map(|(k, v)| format!("{k} == {v}")).collect();
            format!("!({})", terms.join(" && "))
        })
        .collect();
    Some(each.join(" && "))
}

/// A kernel's configs over a resource limit, with the rule that excludes exactly them.
pub(super) struct Exclusion<'a> {
    /// Index into the project's kernels.
    pub kernel: usize,
    /// The configs over a limit (on some target).
    pub failing: BTreeSet<&'a Config>,
    /// The `require` rule that excludes exactly `failing`.
    pub rule: String,
    /// How many configs of the kernel the rule keeps.
    pub kept: usize,
    /// Each limit's one-line summary ([`Limit::summary`]).
    pub reasons: BTreeSet<String>,
}

/// Per kernel with configs over a resource limit (each with its failure's summary), the
/// rule that excludes exactly those configs (on every target: a rule is over params).
pub(super) fn exclusions<'a>(
    ws: &crate::workspace::Workspace,
    over: &[(&'a crate::pipeline::Planned, String)],
) -> Vec<Exclusion<'a>> {
    let mut by_kernel: std::collections::BTreeMap<
        usize,
        Vec<&(&'a crate::pipeline::Planned, String)>,
    > = Default::default();
    for o in over {
        by_kernel.entry(o.0.kernel).or_default().push(o);
    }
    by_kernel
        .into_iter()
        .filter_map(|(k, members)| {
            let failing: BTreeSet<&'a Config> = members.iter().map(|(p, _)| &p.config).collect();
            let reasons = members.iter().map(|(_, why)| why.clone()).collect();
            let all = ws.project.kernels[k].configs().ok()?;
            let refs: Vec<&Config> = all.iter().collect();
            let rule = require_rule(&refs, &failing)?;
            Some(Exclusion {
                kernel: k,
                kept: all.len() - failing.len(),
                failing,
                rule,
                reasons,
            })
        })
        .collect()
}

/// What to add to kernel.toml for each exclusion, for a build without
/// `--skip-infeasible`.
pub(super) fn advice(
    ws: &crate::workspace::Workspace,
    exclusions: &[Exclusion<'_>],
) -> Vec<String> {
    exclusions
        .iter()
        .map(|e| {
            let kernel = &ws.project.kernels[e.kernel];
            let rule = serde_json::Value::String(e.rule.clone());
            let list = if kernel.require.is_empty() {
                format!("require = [{rule}]")
            } else {
                format!("{rule} to its `require` list")
            };
            format!(
                "  to lock the other {} configs of `{}`, add {list} to {} (it excludes exactly the {} over the limit), \
                 or run `kart build --skip-infeasible`, which adds it",
                e.kept,
                kernel.name,
                kernel.manifest.display(),
                e.failing.len()
            )
        })
        .collect()
}

/// The comment written above a rule that `--skip-infeasible` records.
pub(super) fn comment(e: &Exclusion<'_>) -> String {
    let reasons: Vec<&str> = e.reasons.iter().map(String::as_str).collect();
    format!(
        "{} config(s) {} (ptxas); excluded by kart build --skip-infeasible",
        e.failing.len(),
        reasons.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rows: i64, cols: i64) -> Config {
        Config::from([
            ("COLS".to_string(), ParamValue::Int(cols)),
            ("ROWS".to_string(), ParamValue::Int(rows)),
        ])
    }

    #[test]
    fn ptxas_limits_are_read_and_others_are_not() {
        let out = "ptxas error   : Entry function '_Z3bigILi32ELi512EEvPf' uses too much shared data (0x10000 bytes, 0xc000 max)\nptxas info    : 0 bytes gmem";
        assert_eq!(
            limit(out),
            Some(Limit {
                resource: "shared data".into(),
                max: 0xc000
            })
        );
        assert_eq!(limit("kernels/a.cu(4): error: expected a \";\""), None);
    }

    #[test]
    fn the_rule_excludes_exactly_the_failing_configs() {
        let all: Vec<Config> = [8, 16, 32]
            .iter()
            .flat_map(|&r| [256, 512].map(|c| config(r, c)))
            .collect();
        let refs: Vec<&Config> = all.iter().collect();
        // One param: everything from ROWS = 32 up.
        let failing: BTreeSet<&Config> = all.iter().filter(|c| ints(c, "ROWS") >= 32).collect();
        assert_eq!(require_rule(&refs, &failing).unwrap(), "ROWS < 32");
        // A product: only 32 × 512 reaches 16384 (16 × 512 and 32 × 256 are 8192).
        let failing: BTreeSet<&Config> = [&all[5]].into();
        assert_eq!(
            require_rule(&refs, &failing).unwrap(),
            "COLS * ROWS < 16384"
        );
        // No bound: the configs, listed.
        let failing: BTreeSet<&Config> = [&all[0], &all[5]].into();
        assert_eq!(
            require_rule(&refs, &failing).unwrap(),
            "!(COLS == 256 && ROWS == 8) && !(COLS == 512 && ROWS == 32)"
        );
        assert_eq!(require_rule(&refs, &BTreeSet::new()), None);
    }

    fn ints(c: &Config, name: &str) -> i64 {
        match c.get(name) {
            Some(ParamValue::Int(v)) => *v,
            _ => panic!(),
        }
    }
}
