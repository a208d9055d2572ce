//! `[launch]`: a kernel's grid, block and dynamic shared memory as expressions over a
//! config and a problem, as kernel.toml declares them and the lock carries them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::expr::{Env, Expr, ExprError, Layered};
use crate::model::Config;

/// `[launch]`: grid, block and dynamic shared memory as expressions over the config
/// (params and derived params) and the problem's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    /// 1 to 3 expressions: x, y, z (missing ones are 1).
    pub grid: Vec<Expr>,
    /// 1 to 3 expressions.
    pub block: Vec<Expr>,
    /// Bytes of dynamic shared memory (0 when absent).
    pub shared_mem: Option<Expr>,
    /// `[launch.args]`: per entry, how kart makes each parameter from the caller's
    /// arguments (entries not named take their parameters as the caller passes them).
    pub args: BTreeMap<String, Vec<crate::call::ArgSpec>>,
}

/// `[launch]` as text, as the lock and the exported module carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchText {
    /// Grid expressions.
    pub grid: Vec<String>,
    /// Block expressions.
    pub block: Vec<String>,
    /// Dynamic shared memory expression (`"0"` when absent).
    pub shared_mem: String,
    /// `[launch.args]`, per entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, Vec<crate::call::ArgText>>,
}

/// Launch geometry computed for one config and problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads in x, y, z.
    pub block: (u32, u32, u32),
    /// Bytes of dynamic shared memory.
    pub shared_bytes: u32,
}

/// Why geometry could not be computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// An expression failed (unknown problem key, division by zero, overflow).
    Expr {
        /// `grid[0]`, `block[1]`, `shared_mem`.
        field: String,
        /// The expression's text.
        text: String,
        /// What failed.
        error: ExprError,
    },
    /// A value outside what the driver takes (grid and block at least 1).
    OutOfRange {
        /// The field.
        field: String,
        /// The value.
        value: i64,
    },
}

impl std::fmt::Display for GeometryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GeometryError::Expr { field, text, error } => {
                write!(f, "[launch] {field} = \"{text}\": {error}")
            }
            GeometryError::OutOfRange { field, value } => write!(
                f,
                "[launch] {field} is {value}, outside what a launch takes (grid and block at least 1, at most 2^32 - 1)"
            ),
        }
    }
}

impl LaunchSpec {
    /// The expressions' texts.
    pub fn text(&self) -> LaunchText {
        LaunchText {
            grid: self.grid.iter().map(|e| e.text.clone()).collect(),
            block: self.block.iter().map(|e| e.text.clone()).collect(),
            shared_mem: self
                .shared_mem
                .as_ref()
                .map_or_else(|| "0".to_string(), |e| e.text.clone()),
            args: self
                .args
                .iter()
                .map(|(entry, a)| (entry.clone(), a.iter().map(|a| a.text()).collect()))
                .collect(),
        }
    }

    /// Parses lock text back (it was checked when the lock was written).
    pub fn from_text(text: &LaunchText) -> Result<LaunchSpec, ExprError> {
        let parse = |v: &[String]| -> Result<Vec<Expr>, ExprError> {
            v.iter().map(|t| Expr::parse(t)).collect()
        };
        Ok(LaunchSpec {
            grid: parse(&text.grid)?,
            block: parse(&text.block)?,
            shared_mem: Some(Expr::parse(&text.shared_mem)?),
            args: text
                .args
                .iter()
                .map(|(entry, a)| {
                    let specs = a
                        .iter()
                        .map(crate::call::ArgSpec::from_text)
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((entry.clone(), specs))
                })
                .collect::<Result<_, ExprError>>()?,
        })
    }

    /// Grid, block and shared memory for a config (params and derived params) and a
    /// problem. Config names win over problem keys of the same name.
    pub fn geometry<P: Env + ?Sized>(
        &self,
        config: &Config,
        derived: &BTreeMap<String, i64>,
        problem: &P,
    ) -> Result<Geometry, GeometryError> {
        let env = Layered(config, &Layered(derived, problem));
        let eval = |field: String, e: &Expr, min: i64| -> Result<u32, GeometryError> {
            let value = e.evaluate(&env).map_err(|error| GeometryError::Expr {
                field: field.clone(),
                text: e.text.clone(),
                error,
            })?;
            if value < min || value > i64::from(u32::MAX) {
                return Err(GeometryError::OutOfRange { field, value });
            }
            Ok(value as u32)
        };
        let three = |name: &str, list: &[Expr]| -> Result<(u32, u32, u32), GeometryError> {
            let mut v = [1u32; 3];
            for (i, e) in list.iter().enumerate().take(3) {
                v[i] = eval(format!("{name}[{i}]"), e, 1)?;
            }
            Ok((v[0], v[1], v[2]))
        };
        Ok(Geometry {
            grid: three("grid", &self.grid)?,
            block: three("block", &self.block)?,
            shared_bytes: match &self.shared_mem {
                Some(e) => eval("shared_mem".into(), e, 0)?,
                None => 0,
            },
        })
    }
}
