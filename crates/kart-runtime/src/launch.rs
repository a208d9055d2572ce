//! `[launch]`: a kernel's grid, block, dynamic shared memory, thread-block cluster and
//! launch attributes as expressions over a config and a problem, as kernel.toml
//! declares them and the lock carries them.

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
    /// 1 to 3 expressions: the thread-block cluster in blocks (x, y, z), or none (no
    /// cluster: an ordinary launch).
    pub cluster: Vec<Expr>,
    /// Programmatic dependent launch: the kernel may start while the previous kernel
    /// of its stream finishes (non-zero: on), when declared.
    pub pdl: Option<Expr>,
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
    /// Cluster expressions (absent: no cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<String>,
    /// Programmatic dependent launch expression (`"1"` for `pdl = true`; absent: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdl: Option<String>,
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
    /// Blocks per thread-block cluster in x, y, z, when `[launch]` declares one; the
    /// grid is a whole number of them.
    pub cluster: Option<(u32, u32, u32)>,
    /// Whether the launch allows programmatic dependent launch
    /// (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`).
    pub pdl: bool,
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
    /// A grid side that is not a multiple of the cluster's.
    NotWholeClusters {
        /// The grid in blocks.
        grid: (u32, u32, u32),
        /// The cluster in blocks.
        cluster: (u32, u32, u32),
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
                "[launch] {field} is {value}, outside what a launch takes (grid, block and cluster at least 1, at most 2^32 - 1)"
            ),
            GeometryError::NotWholeClusters { grid, cluster } => write!(
                f,
                "[launch] grid {grid:?} is not a whole number of clusters {cluster:?}: each grid side must be a multiple of the cluster's"
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
            cluster: self.cluster.iter().map(|e| e.text.clone()).collect(),
            pdl: self.pdl.as_ref().map(|e| e.text.clone()),
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
            cluster: parse(&text.cluster)?,
            pdl: text.pdl.as_deref().map(Expr::parse).transpose()?,
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
        let grid = three("grid", &self.grid)?;
        let cluster = if self.cluster.is_empty() {
            None
        } else {
            Some(three("cluster", &self.cluster)?)
        };
        if let Some(c) = cluster
            && (!grid.0.is_multiple_of(c.0)
                || !grid.1.is_multiple_of(c.1)
                || !grid.2.is_multiple_of(c.2))
        {
            return Err(GeometryError::NotWholeClusters { grid, cluster: c });
        }
        Ok(Geometry {
            grid,
            block: three("block", &self.block)?,
            shared_bytes: match &self.shared_mem {
                Some(e) => eval("shared_mem".into(), e, 0)?,
                None => 0,
            },
            cluster,
            pdl: match &self.pdl {
                Some(e) => eval("pdl".into(), e, 0)? != 0,
                None => false,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_and_pdl_travel_as_text_and_are_absent_when_unused() {
        let plain = LaunchText {
            grid: vec!["cdiv(N, 128)".into()],
            block: vec!["128".into()],
            shared_mem: "0".into(),
            ..Default::default()
        };
        let text = toml::to_string(&plain).unwrap();
        assert!(!text.contains("cluster") && !text.contains("pdl"), "{text}");
        let clustered = LaunchText {
            cluster: vec!["CLUSTER".into(), "1".into()],
            pdl: Some("1".into()),
            ..plain.clone()
        };
        let text = toml::to_string(&clustered).unwrap();
        let back: LaunchText = toml::from_str(&text).unwrap();
        assert_eq!(back, clustered);
        let spec = LaunchSpec::from_text(&back).unwrap();
        assert_eq!(spec.text(), clustered);
        let config = Config::from([("CLUSTER".to_string(), crate::model::ParamValue::Int(4))]);
        let problem: BTreeMap<String, i64> = [("N".to_string(), 1024)].into();
        let g = spec.geometry(&config, &BTreeMap::new(), &problem).unwrap();
        assert_eq!(
            (g.grid, g.cluster, g.pdl),
            ((8, 1, 1), Some((4, 1, 1)), true)
        );
        let small: BTreeMap<String, i64> = [("N".to_string(), 128)].into();
        let err = spec
            .geometry(&config, &BTreeMap::new(), &small)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "[launch] grid (1, 1, 1) is not a whole number of clusters (4, 1, 1): each grid side must be a multiple of the cluster's"
        );
    }
}
