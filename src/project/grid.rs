//! A kernel's grid beyond the cross product: `require` rules that keep a config only if
//! they all hold, `[derived]` params computed from each config, and `[launch]` geometry
//! computed from a config and a problem. All three are expressions of
//! [`crate::expr`].

use std::collections::BTreeMap;

use serde::Serialize;

use kart_runtime::expr::{Env, Expr, ExprError, Layered, Value};
use kart_runtime::model::{Config, ParamValue};

/// A `require` rule: a config is built only if it evaluates to non-zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The rule.
    pub expr: Expr,
}

/// A derived param: `NAME = "expression over params and earlier derived params"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    /// Its name, passed to nvcc as `-DNAME=value`.
    pub name: String,
    /// How it is computed.
    pub expr: Expr,
}

/// How a grid was narrowed, step by step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GridReport {
    /// Combinations of the params' values.
    pub raw: usize,
    /// Each step (`[[exclude]]`, then each `require` rule in order) and how many
    /// configs it removed of those still kept before it.
    pub steps: Vec<(String, usize)>,
    /// The configs built.
    pub kept: usize,
}

/// A kernel's grid as the steps that narrow it see it: the params' values, the
/// `[[exclude]]` entries, the `require` rules and the `[derived]` params.
#[derive(Clone, Copy, Debug)]
pub struct Grid<'a> {
    /// Param → values in the order written.
    pub params: &'a BTreeMap<String, Vec<ParamValue>>,
    /// Partial assignments never built.
    pub exclude: &'a [BTreeMap<String, ParamValue>],
    /// Rules every kept config satisfies.
    pub require: &'a [Rule],
    /// Params computed from each config, in evaluation order.
    pub derived: &'a [Derived],
    /// Combinations of problem params' values that problems have (empty: any).
    pub combos: &'a [BTreeMap<String, ParamValue>],
}

impl Grid<'_> {
    /// The derived params of a config, in dependency order.
    pub fn derived_values(
        &self,
        config: &Config,
    ) -> Result<BTreeMap<String, i64>, (usize, ExprError)> {
        let mut values = BTreeMap::new();
        for (i, d) in self.derived.iter().enumerate() {
            let v = d
                .expr
                .evaluate(&Layered(config, &values))
                .map_err(|e| (i, e))?;
            values.insert(d.name.clone(), v);
        }
        Ok(values)
    }

    /// Whether every `require` rule holds for a config (`Err`: rule index and error).
    pub fn satisfies(&self, config: &Config) -> Result<bool, (RuleOrDerived, ExprError)> {
        let derived = self
            .derived_values(config)
            .map_err(|(i, e)| (RuleOrDerived::Derived(i), e))?;
        for (i, rule) in self.require.iter().enumerate() {
            let v = rule
                .expr
                .evaluate(&Layered(config, &derived))
                .map_err(|e| (RuleOrDerived::Rule(i), e))?;
            if v == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The grid step by step: raw combinations, what `[[exclude]]` and each rule
    /// removed, what is kept. A rule or derived param that fails to evaluate on a
    /// config is an error naming the config.
    pub fn report(&self) -> Result<(GridReport, Vec<Config>), GridError> {
        self.walk(true)
    }

    /// [`Grid::report`] without the configs: every rule and derived param evaluated
    /// on every combination, nothing allocated per config (what loading a kernel of
    /// tens of thousands of configs checks).
    pub fn check(&self) -> Result<GridReport, GridError> {
        self.walk(false).map(|(report, _)| report)
    }

    /// Whether the grid keeps `config`: a value of every param from its list, no
    /// other key, not excluded, of a problem's combination, every rule holding.
    pub fn keeps(&self, config: &Config) -> bool {
        let listed = config.len() == self.params.len()
            && self
                .params
                .iter()
                .all(|(k, values)| config.get(k).is_some_and(|v| values.contains(v)));
        listed
            && (self.combos.is_empty() || self.combos.iter().any(|c| config.matches(c)))
            && !self.exclude.iter().any(|e| config.matches(e))
            && self.satisfies(config) == Ok(true)
    }

    fn walk(&self, collect: bool) -> Result<(GridReport, Vec<Config>), GridError> {
        // One pass over the combinations by index, with the values in flat arrays: a
        // `Config` (a map of owned strings) is built only for the configs kept, which
        // matters for grids of tens of thousands. Counts and errors are those of
        // filtering step by step: a config is counted against the first step that
        // removes it, and the error reported is the one of the earliest step, on the
        // first config that reaches it.
        let names: Vec<&str> = self.params.keys().map(String::as_str).collect();
        let lists: Vec<&Vec<ParamValue>> = self.params.values().collect();
        let raw: usize = lists.iter().map(|l| l.len()).product();
        if raw == 0 {
            // A param without values (a problem param before problems are bound).
            return Ok((GridReport::default(), Vec::new()));
        }
        let derived_names: Vec<&str> = self.derived.iter().map(|d| d.name.as_str()).collect();
        let mut removed = vec![0usize; self.require.len()];
        let mut excluded = 0usize;
        let mut not_a_problem = 0usize;
        let mut kept = Vec::new();
        let mut kept_count = 0usize;
        let mut derived_error: Option<GridError> = None;
        let mut rule_error: Option<(usize, GridError)> = None;
        let mut index = vec![0usize; lists.len()];
        let mut values: Vec<&ParamValue> = lists.iter().map(|l| &l[0]).collect();
        let mut derived = vec![0i64; self.derived.len()];
        let config_of = |values: &[&ParamValue]| {
            names
                .iter()
                .zip(values)
                .map(|(n, v)| (n.to_string(), (*v).clone()))
                .collect::<Config>()
        };
        for _ in 0..raw {
            let (excluded_here, other_problem) =
                if self.exclude.is_empty() && self.combos.is_empty() {
                    (false, false)
                } else {
                    let config = config_of(&values);
                    let other =
                        !self.combos.is_empty() && !self.combos.iter().any(|c| config.matches(c));
                    (
                        !other && self.exclude.iter().any(|e| config.matches(e)),
                        other,
                    )
                };
            if other_problem {
                not_a_problem += 1;
            } else if excluded_here {
                excluded += 1;
            } else {
                let mut ok = true;
                for (i, d) in self.derived.iter().enumerate() {
                    let env = FlatEnv {
                        names: &names,
                        values: &values,
                        derived_names: &derived_names,
                        derived: &derived,
                        derived_len: i,
                    };
                    match d.expr.evaluate(&env) {
                        Ok(v) => derived[i] = v,
                        Err(error) => {
                            if derived_error.is_none() {
                                derived_error = Some(GridError {
                                    at: RuleOrDerived::Derived(i),
                                    config: config_of(&values),
                                    error,
                                });
                            }
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    let env = FlatEnv {
                        names: &names,
                        values: &values,
                        derived_names: &derived_names,
                        derived: &derived,
                        derived_len: derived.len(),
                    };
                    let mut passed = true;
                    for (i, rule) in self.require.iter().enumerate() {
                        match rule.expr.evaluate(&env) {
                            Ok(0) => {
                                removed[i] += 1;
                                passed = false;
                                break;
                            }
                            Ok(_) => {}
                            Err(error) => {
                                if rule_error.as_ref().is_none_or(|(at, _)| i < *at) {
                                    rule_error = Some((
                                        i,
                                        GridError {
                                            at: RuleOrDerived::Rule(i),
                                            config: config_of(&values),
                                            error,
                                        },
                                    ));
                                }
                                passed = false;
                                break;
                            }
                        }
                    }
                    if passed {
                        kept_count += 1;
                        if collect {
                            kept.push(config_of(&values));
                        }
                    }
                }
            }
            // The next combination: the last param varies fastest.
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < lists[d].len() {
                    values[d] = &lists[d][index[d]];
                    break;
                }
                index[d] = 0;
                values[d] = &lists[d][0];
            }
        }
        if let Some(e) = derived_error {
            return Err(e);
        }
        if let Some((_, e)) = rule_error {
            return Err(e);
        }
        let mut report = GridReport {
            raw,
            ..GridReport::default()
        };
        if !self.combos.is_empty() {
            report
                .steps
                .push(("combinations no problem has".into(), not_a_problem));
        }
        if !self.exclude.is_empty() {
            report.steps.push(("[[exclude]]".into(), excluded));
        }
        for (rule, n) in self.require.iter().zip(removed) {
            report
                .steps
                .push((format!("require \"{}\"", rule.expr.text), n));
        }
        report.kept = kept_count;
        Ok((report, kept))
    }
}

impl Grid<'_> {
    /// Why the grid keeps no config with the values of `filter` (params it does not
    /// have are ignored): each value that is not one of its param's, else how the
    /// combinations with these values were removed (`[[exclude]]`, which `require`
    /// rule). `None` when some config is kept.
    pub fn why_none(&self, filter: &BTreeMap<String, ParamValue>) -> Option<String> {
        let valueless: Vec<&str> = self
            .params
            .iter()
            .filter(|(_, values)| values.is_empty())
            .map(|(name, _)| name.as_str())
            .collect();
        if !valueless.is_empty() {
            return Some(format!(
                "{} take(s) the values of problems (`[problem_params]`) and none were given: pass `kart build --problems FILE` or `--trace FILE`",
                valueless.join(", ")
            ));
        }
        let mut narrowed = self.params.clone();
        let mut not_values = Vec::new();
        for (name, value) in filter {
            let Some(values) = narrowed.get_mut(name) else {
                continue;
            };
            if !values.contains(value) {
                let listed: Vec<String> = values.iter().map(ToString::to_string).collect();
                not_values.push(format!(
                    "{name}={value} is not one of its values ({})",
                    listed.join(", ")
                ));
            }
            values.retain(|v| v == value);
        }
        if !not_values.is_empty() {
            return Some(not_values.join("; "));
        }
        let grid = Grid {
            params: &narrowed,
            ..*self
        };
        let Ok((report, _)) = grid.report() else {
            return Some("its rules fail to evaluate on these values".into());
        };
        if report.kept > 0 {
            return None;
        }
        let removed: Vec<String> = report
            .steps
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(step, n)| format!("{step} removes {n}"))
            .collect();
        let given: Vec<String> = filter
            .iter()
            .filter(|(name, _)| self.params.contains_key(*name))
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        Some(format!(
            "of the {} combination(s) with {}, {}",
            report.raw,
            if given.is_empty() {
                "any values".to_string()
            } else {
                given.join(",")
            },
            removed.join(", ")
        ))
    }
}

/// A combination's values by param name, then the derived params computed so far.
#[derive(Clone, Copy)]
struct FlatEnv<'a> {
    names: &'a [&'a str],
    values: &'a [&'a ParamValue],
    derived_names: &'a [&'a str],
    derived: &'a [i64],
    derived_len: usize,
}

impl Env for FlatEnv<'_> {
    fn get(&self, name: &str) -> Option<Value<'_>> {
        if let Some(i) = self.names.iter().position(|n| *n == name) {
            return Some(match self.values[i] {
                ParamValue::Int(v) => Value::Int(*v),
                ParamValue::Ident(s) => Value::Ident(s),
            });
        }
        self.derived_names[..self.derived_len]
            .iter()
            .position(|n| *n == name)
            .map(|i| Value::Int(self.derived[i]))
    }
}

/// Which expression failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOrDerived {
    /// `require[i]`.
    Rule(usize),
    /// The i-th derived param (in evaluation order).
    Derived(usize),
}

/// An expression that failed on a config of the grid.
#[derive(Clone, Debug)]
pub struct GridError {
    /// Which one.
    pub at: RuleOrDerived,
    /// The config.
    pub config: Config,
    /// What failed.
    pub error: ExprError,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::Kernel;
    use kart_runtime::launch::{GeometryError, LaunchSpec};
    use std::collections::BTreeMap;

    fn kernel(params: &[(&str, Vec<i64>)], require: &[&str], derived: &[(&str, &str)]) -> Kernel {
        let mut k = crate::pipeline::smoke::smoke_kernel(vec![]);
        k.params = params
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    v.iter().map(|i| ParamValue::Int(*i)).collect(),
                )
            })
            .collect();
        k.require = require
            .iter()
            .map(|r| Rule {
                expr: Expr::parse(r).unwrap(),
            })
            .collect();
        k.derived = derived
            .iter()
            .map(|(n, e)| Derived {
                name: n.to_string(),
                expr: Expr::parse(e).unwrap(),
            })
            .collect();
        k
    }

    #[test]
    fn filtering_a_100k_grid_matches_brute_force() {
        let values: Vec<i64> = (1..=10).collect();
        let k = kernel(
            &[
                ("P", values.iter().map(|v| v * 16).collect()),
                ("Q", values.clone()),
                ("R", values.clone()),
                ("S", values.clone()),
                ("T", values.clone()),
            ],
            &["P % (Q * 8) == 0", "R * S <= 24 && WARPS >= 2", "T != Q"],
            &[("WARPS", "P / (Q * 8)")],
        );
        let start = std::time::Instant::now();
        let (report, kept) = k.grid_report().unwrap();
        let elapsed = start.elapsed();
        let mut brute = Vec::new();
        for p in values.iter().map(|v| v * 16) {
            for q in &values {
                for r in &values {
                    for s in &values {
                        for t in &values {
                            let warps = p / (q * 8);
                            if p % (q * 8) == 0 && r * s <= 24 && warps >= 2 && t != q {
                                brute.push((p, *q, *r, *s, *t));
                            }
                        }
                    }
                }
            }
        }
        let int = |c: &Config, n: &str| match c.get(n) {
            Some(ParamValue::Int(i)) => *i,
            _ => panic!("{n}"),
        };
        let mut got: Vec<(i64, i64, i64, i64, i64)> = kept
            .iter()
            .map(|c| {
                (
                    int(c, "P"),
                    int(c, "Q"),
                    int(c, "R"),
                    int(c, "S"),
                    int(c, "T"),
                )
            })
            .collect();
        got.sort();
        brute.sort();
        assert_eq!(report.raw, 100_000);
        assert_eq!(got, brute);
        assert_eq!(report.kept, brute.len());
        let removed: usize = report.steps.iter().map(|(_, n)| n).sum();
        assert_eq!(removed + report.kept, report.raw, "{report:?}");
        // Checking without the configs counts the same; one config at a time agrees.
        assert_eq!(k.grid().check().unwrap(), report);
        assert!(kept.iter().all(|c| k.grid().keeps(c)));
        let mut dropped = kept[0].clone();
        dropped.insert("T", ParamValue::Int(int(&kept[0], "Q")));
        assert!(!k.grid().keeps(&dropped), "T != Q");
        dropped.insert("T", ParamValue::Int(11));
        assert!(!k.grid().keeps(&dropped), "11 is not a listed value");
        dropped.remove("T");
        assert!(!k.grid().keeps(&dropped), "a param missing");
        // Printed for the record (a benchmark, not an assertion): bench/grid.sh times it.
        println!(
            "100k raw configs filtered to {} in {elapsed:?}",
            report.kept
        );
    }

    #[test]
    fn why_none_names_the_value_or_the_step() {
        let mut k = kernel(
            &[("BM", vec![64, 128]), ("BN", vec![64, 128])],
            &["BM * BN < 8192"],
            &[],
        );
        k.exclude = vec![BTreeMap::from([
            ("BM".to_string(), ParamValue::Int(64)),
            ("BN".to_string(), ParamValue::Int(128)),
        ])];
        let filter = |pairs: &[(&str, i64)]| -> BTreeMap<String, ParamValue> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), ParamValue::Int(*v)))
                .collect()
        };
        let grid = k.grid();
        assert_eq!(grid.why_none(&filter(&[("BM", 64)])), None);
        assert_eq!(
            grid.why_none(&filter(&[("BM", 48), ("OTHER", 1)])).unwrap(),
            "BM=48 is not one of its values (64, 128)"
        );
        assert_eq!(
            grid.why_none(&filter(&[("BM", 128)])).unwrap(),
            "of the 2 combination(s) with BM=128, require \"BM * BN < 8192\" removes 2"
        );
        assert_eq!(
            grid.why_none(&filter(&[("BN", 128)])).unwrap(),
            "of the 2 combination(s) with BN=128, [[exclude]] removes 1, require \"BM * BN < 8192\" removes 1"
        );
    }

    #[test]
    fn derived_params_chain_and_geometry_uses_config_then_problem() {
        let k = kernel(
            &[("BLOCK_M", vec![64, 128]), ("NUM_WARPS", vec![4])],
            &[],
            &[("ROWS", "BLOCK_M / NUM_WARPS"), ("TILES", "ROWS / 16")],
        );
        let config = Config::from([
            ("BLOCK_M".to_string(), ParamValue::Int(128)),
            ("NUM_WARPS".to_string(), ParamValue::Int(4)),
        ]);
        let derived = k.derived_values(&config).unwrap();
        assert_eq!(derived, [("ROWS".into(), 32), ("TILES".into(), 2)].into());
        let spec = LaunchSpec {
            grid: vec![
                Expr::parse("cdiv(S, BLOCK_M)").unwrap(),
                Expr::parse("B * H").unwrap(),
            ],
            block: vec![Expr::parse("NUM_WARPS * 32").unwrap()],
            shared_mem: Some(Expr::parse("TILES * 1024").unwrap()),
            cluster: vec![Expr::parse("TILES").unwrap(), Expr::parse("1").unwrap()],
            pdl: Some(Expr::parse("B > 1").unwrap()),
            args: BTreeMap::new(),
        };
        let problem: BTreeMap<String, i64> = [
            ("B".into(), 2),
            ("H".into(), 8),
            ("S".into(), 500),
            ("BLOCK_M".into(), 1),
        ]
        .into();
        let g = spec.geometry(&config, &derived, &problem).unwrap();
        assert_eq!(g.grid, (4, 16, 1));
        assert_eq!(g.block, (128, 1, 1));
        assert_eq!(g.shared_bytes, 2048);
        assert_eq!(g.cluster, Some((2, 1, 1)));
        assert!(g.pdl);
        let odd: BTreeMap<String, i64> =
            [("B".into(), 1), ("H".into(), 8), ("S".into(), 300)].into();
        let err = spec.geometry(&config, &derived, &odd).unwrap_err();
        assert_eq!(
            err,
            GeometryError::NotWholeClusters {
                grid: (3, 8, 1),
                cluster: (2, 1, 1)
            }
        );
        assert!(
            err.to_string()
                .contains("grid (3, 8, 1) is not a whole number of clusters (2, 1, 1)"),
            "{err}"
        );
        let empty = BTreeMap::<String, i64>::new();
        let err = spec.geometry(&config, &derived, &empty).unwrap_err();
        assert!(err.to_string().contains("unknown name `S`"), "{err}");
        let zero: BTreeMap<String, i64> =
            [("B".into(), 0), ("H".into(), 8), ("S".into(), 500)].into();
        let err = spec.geometry(&config, &derived, &zero).unwrap_err();
        assert!(
            matches!(err, GeometryError::OutOfRange { value: 0, .. }),
            "{err}"
        );
        assert_eq!(
            LaunchSpec::from_text(&spec.text()).unwrap().text(),
            spec.text()
        );
    }
}
