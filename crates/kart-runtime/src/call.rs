//! `[launch.args]`: the arguments kart makes for a kernel from what its caller passes.
//!
//! A TMA kernel takes tensor maps whose tiles depend on the config (`BLOCK_N` rows of
//! K per copy), and a persistent kernel takes sizes that its grid no longer carries
//! (`B * H`). Written by the caller, both tie the call to one config, and `best()`
//! could not hand out a launcher that is simply called. Declared here, they are made
//! per launch from the problem and the config, and the caller passes pointers and the
//! kernel's plain arguments: the *call signature*. Two variants of one kernel with the
//! same call signature are interchangeable (see `variant_of`).
//!
//! ```toml
//! [launch.args]
//! kart_flash_attn_fwd = [
//!   { tensormap = "f16", shape = ["B * H", "S", "HEAD_DIM"], tile = [1, "BLOCK_N", 64], swizzle = "SWIZZLE" },
//!   "pass",                   # the caller's next argument, as the signature says
//!   { value = "B * H" },      # an integer of the problem and config; the caller passes nothing
//! ]
//! ```

use serde::{Deserialize, Serialize};

use crate::expr::{Env, Expr, ExprError};
use crate::signature::ParamKind;

/// One kernel parameter, as kart makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgSpec {
    /// The caller's next argument, as the entry's signature says.
    Pass,
    /// An integer computed from the config and the problem; the caller passes nothing.
    Value(Expr),
    /// A tensor map kart encodes over the caller's next argument, a device pointer to
    /// a contiguous, row-major tensor of `shape` (outermost first).
    TensorMap {
        /// Element type: `u8` (also FP8), `u16`, `u32`, `i32`, `u64`, `i64`, `f16`,
        /// `bf16`, `f32`, `f64`.
        dtype: String,
        /// The tensor's shape, outermost first.
        shape: Vec<Expr>,
        /// The box one TMA copy moves, outermost first.
        tile: Vec<Expr>,
        /// The shared-memory swizzle in bytes: 0, 32, 64 or 128.
        swizzle: Expr,
        /// How far the L2 cache is filled past each copy, in bytes: 0, 64, 128 or 256
        /// (128 when absent).
        l2_promotion: Option<Expr>,
    },
}

/// A number of `[launch.args]` as text: an integer as written, or an expression.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumText {
    /// `128`.
    Int(i64),
    /// `"SWIZZLE"`, `"min(BK * 2, 128)"`.
    Expr(String),
}

impl NumText {
    /// An expression's text, as an integer when it is one.
    pub fn of(e: &Expr) -> NumText {
        match e.text.trim().parse::<i64>() {
            Ok(v) if v.to_string() == e.text.trim() => NumText::Int(v),
            _ => NumText::Expr(e.text.clone()),
        }
    }

    /// Its expression.
    pub fn parse(&self) -> Result<Expr, ExprError> {
        match self {
            NumText::Int(v) => Expr::parse(&v.to_string()),
            NumText::Expr(t) => Expr::parse(t),
        }
    }
}

/// The legal swizzles, in bytes.
pub const SWIZZLES: [i64; 4] = [0, 32, 64, 128];
/// The legal L2 promotions, in bytes.
pub const L2_PROMOTIONS: [i64; 4] = [0, 64, 128, 256];

/// [`ArgSpec`] as text, as the lock and the exported module carry it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ArgText {
    /// `"pass"`.
    Pass(String),
    /// `{ value = "B * H" }`.
    Value {
        /// The expression.
        value: String,
    },
    /// `{ tensormap = "f16", shape = [...], tile = [...], swizzle = 128 }`.
    TensorMap {
        /// Element type.
        tensormap: String,
        /// Shape expressions.
        shape: Vec<String>,
        /// Tile expressions.
        tile: Vec<String>,
        /// Swizzle bytes: an integer or an expression.
        swizzle: NumText,
        /// L2 promotion bytes, when declared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        l2_promotion: Option<NumText>,
    },
}

impl ArgSpec {
    /// Its text.
    pub fn text(&self) -> ArgText {
        match self {
            ArgSpec::Pass => ArgText::Pass("pass".into()),
            ArgSpec::Value(e) => ArgText::Value {
                value: e.text.clone(),
            },
            ArgSpec::TensorMap {
                dtype,
                shape,
                tile,
                swizzle,
                l2_promotion,
            } => ArgText::TensorMap {
                tensormap: dtype.clone(),
                shape: shape.iter().map(|e| e.text.clone()).collect(),
                tile: tile.iter().map(|e| e.text.clone()).collect(),
                swizzle: NumText::of(swizzle),
                l2_promotion: l2_promotion.as_ref().map(NumText::of),
            },
        }
    }

    /// Parses lock text back (it was checked when the lock was written).
    pub fn from_text(text: &ArgText) -> Result<ArgSpec, ExprError> {
        let parse = |v: &[String]| -> Result<Vec<Expr>, ExprError> {
            v.iter().map(|t| Expr::parse(t)).collect()
        };
        Ok(match text {
            ArgText::Pass(_) => ArgSpec::Pass,
            ArgText::Value { value } => ArgSpec::Value(Expr::parse(value)?),
            ArgText::TensorMap {
                tensormap,
                shape,
                tile,
                swizzle,
                l2_promotion,
            } => ArgSpec::TensorMap {
                dtype: tensormap.clone(),
                shape: parse(shape)?,
                tile: parse(tile)?,
                swizzle: swizzle.parse()?,
                l2_promotion: l2_promotion.as_ref().map(NumText::parse).transpose()?,
            },
        })
    }

    /// The kind the caller passes for this parameter of `kind`, if any.
    pub fn call_kind(&self, kind: ParamKind) -> Option<ParamKind> {
        match self {
            ArgSpec::Pass => Some(kind),
            ArgSpec::Value(_) => None,
            ArgSpec::TensorMap { .. } => Some(ParamKind::Ptr),
        }
    }
}

/// What the caller passes to an entry: its signature with tensor maps as pointers and
/// computed values left out (the signature itself when the entry has no
/// `[launch.args]`).
pub fn call_signature(signature: &[ParamKind], args: Option<&[ArgSpec]>) -> Vec<ParamKind> {
    match args {
        None => signature.to_vec(),
        Some(args) => signature
            .iter()
            .zip(args)
            .filter_map(|(k, a)| a.call_kind(*k))
            .collect(),
    }
}

/// One kernel parameter made for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MadeArg {
    /// The caller's argument at this index.
    Caller(usize),
    /// A computed integer.
    Value(i64),
    /// A tensor map over the caller's pointer at index `caller`.
    TensorMap {
        /// Index into the caller's arguments.
        caller: usize,
        /// Element type name.
        dtype: String,
        /// Shape, outermost first.
        shape: Vec<u64>,
        /// Row-major strides in elements, outermost first.
        strides: Vec<u64>,
        /// Box, outermost first.
        tile: Vec<u32>,
        /// Swizzle bytes: 0, 32, 64 or 128.
        swizzle: u32,
        /// L2 promotion bytes: 0, 64, 128 or 256.
        l2_promotion: u32,
    },
}

/// Why an argument could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError(pub String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kernel's parameters for a call of `entry` with `caller_count` arguments, over
/// `env` (the config, derived params and problem).
pub fn make_args<E: Env + ?Sized>(
    entry: &str,
    args: &[ArgSpec],
    caller_count: usize,
    env: &E,
) -> Result<Vec<MadeArg>, CallError> {
    let expected = args
        .iter()
        .filter(|a| !matches!(a, ArgSpec::Value(_)))
        .count();
    if caller_count != expected {
        return Err(CallError(format!(
            "{entry} is called with {expected} arguments ([launch.args] makes the rest), got {caller_count}"
        )));
    }
    let eval = |what: String, e: &Expr| -> Result<i64, CallError> {
        e.evaluate(env).map_err(|err| {
            CallError(format!(
                "[launch.args] {entry} {what} = \"{}\": {err}",
                e.text
            ))
        })
    };
    let mut next = 0usize;
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        out.push(match a {
            ArgSpec::Pass => {
                next += 1;
                MadeArg::Caller(next - 1)
            }
            ArgSpec::Value(e) => MadeArg::Value(eval(format!("parameter {i}"), e)?),
            ArgSpec::TensorMap {
                dtype,
                shape,
                tile,
                swizzle,
                l2_promotion,
            } => {
                let one_of = |what: &str, e: &Expr, legal: &[i64]| -> Result<u32, CallError> {
                    let v = eval(format!("parameter {i} {what}"), e)?;
                    legal.contains(&v).then_some(v as u32).ok_or_else(|| {
                        CallError(format!(
                            "[launch.args] {entry} parameter {i} {what} = \"{}\" is {v}, not a legal {what} (one of {} bytes)",
                            e.text,
                            legal.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                        ))
                    })
                };
                let swizzle = one_of("swizzle", swizzle, &SWIZZLES)?;
                let l2_promotion = match l2_promotion {
                    Some(e) => one_of("l2_promotion", e, &L2_PROMOTIONS)?,
                    None => 128,
                };
                let positive = |what: &str, list: &[Expr]| -> Result<Vec<u64>, CallError> {
                    list.iter()
                        .enumerate()
                        .map(|(d, e)| {
                            let v = eval(format!("parameter {i} {what}[{d}]"), e)?;
                            u64::try_from(v).ok().filter(|v| *v >= 1).ok_or_else(|| {
                                CallError(format!(
                                    "[launch.args] {entry} parameter {i} {what}[{d}] = \"{}\" is {v}, not a positive size",
                                    e.text
                                ))
                            })
                        })
                        .collect()
                };
                let shape = positive("shape", shape)?;
                let tile = positive("tile", tile)?
                    .into_iter()
                    .map(|t| u32::try_from(t).unwrap_or(u32::MAX))
                    .collect();
                let mut strides = vec![1u64; shape.len()];
                for d in (0..shape.len().saturating_sub(1)).rev() {
                    strides[d] = strides[d + 1].saturating_mul(shape[d + 1]);
                }
                next += 1;
                MadeArg::TensorMap {
                    caller: next - 1,
                    dtype: dtype.clone(),
                    shape,
                    strides,
                    tile,
                    swizzle,
                    l2_promotion,
                }
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec() -> Vec<ArgSpec> {
        let e = |t: &str| Expr::parse(t).unwrap();
        vec![
            ArgSpec::TensorMap {
                dtype: "f16".into(),
                shape: vec![e("B * H"), e("S"), e("D")],
                tile: vec![e("1"), e("BN"), e("64")],
                swizzle: e("SW"),
                l2_promotion: None,
            },
            ArgSpec::Pass,
            ArgSpec::Value(e("B * H")),
        ]
    }

    #[test]
    fn arguments_are_made_from_the_problem_and_config() {
        let env: BTreeMap<String, i64> = [
            ("B", 2),
            ("H", 3),
            ("S", 100),
            ("D", 64),
            ("BN", 128),
            ("SW", 128),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let made = make_args("fwd", &spec(), 2, &env).unwrap();
        assert_eq!(
            made,
            vec![
                MadeArg::TensorMap {
                    caller: 0,
                    dtype: "f16".into(),
                    shape: vec![6, 100, 64],
                    strides: vec![6400, 64, 1],
                    tile: vec![1, 128, 64],
                    swizzle: 128,
                    l2_promotion: 128,
                },
                MadeArg::Caller(1),
                MadeArg::Value(6),
            ]
        );
        let err = make_args("fwd", &spec(), 3, &env).unwrap_err().0;
        assert!(
            err.contains("called with 2 arguments") && err.contains("got 3"),
            "{err}"
        );
        let mut no_s = env.clone();
        no_s.remove("S");
        let err = make_args("fwd", &spec(), 2, &no_s).unwrap_err().0;
        assert!(err.contains("shape[1] = \"S\""), "{err}");
        let mut zero = env.clone();
        zero.insert("B".into(), 0);
        let err = make_args("fwd", &spec(), 2, &zero).unwrap_err().0;
        assert!(err.contains("not a positive size"), "{err}");
        let mut odd = env.clone();
        odd.insert("SW".into(), 48);
        let err = make_args("fwd", &spec(), 2, &odd).unwrap_err().0;
        assert!(
            err.contains("parameter 0 swizzle = \"SW\" is 48, not a legal swizzle (one of 0, 32, 64, 128 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn l2_promotion_is_evaluated_and_checked() {
        let e = |t: &str| Expr::parse(t).unwrap();
        let spec = |l2: &str| {
            vec![ArgSpec::TensorMap {
                dtype: "f32".into(),
                shape: vec![e("N")],
                tile: vec![e("32")],
                swizzle: e("0"),
                l2_promotion: Some(e(l2)),
            }]
        };
        let env: BTreeMap<String, i64> = [("N".to_string(), 1024), ("L2".to_string(), 256)]
            .into_iter()
            .collect();
        match &make_args("f", &spec("L2"), 1, &env).unwrap()[0] {
            MadeArg::TensorMap { l2_promotion, .. } => assert_eq!(*l2_promotion, 256),
            other => panic!("{other:?}"),
        }
        let err = make_args("f", &spec("L2 / 2 + 1"), 1, &env).unwrap_err().0;
        assert!(
            err.contains("l2_promotion = \"L2 / 2 + 1\" is 129, not a legal l2_promotion (one of 0, 64, 128, 256 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn integer_numbers_keep_their_lock_text() {
        let e = |t: &str| Expr::parse(t).unwrap();
        assert_eq!(NumText::of(&e("128")), NumText::Int(128));
        assert_eq!(NumText::of(&e("SW")), NumText::Expr("SW".into()));
        assert_eq!(NumText::of(&e("2 * 64")), NumText::Expr("2 * 64".into()));
        assert_eq!(NumText::Int(64).parse().unwrap(), e("64"));
    }

    #[test]
    fn the_call_signature_hides_what_kart_makes() {
        let sig = [ParamKind::TensorMap, ParamKind::I32, ParamKind::I32];
        assert_eq!(
            call_signature(&sig, Some(&spec())),
            vec![ParamKind::Ptr, ParamKind::I32]
        );
        assert_eq!(call_signature(&sig, None), sig.to_vec());
        for a in spec() {
            assert_eq!(ArgSpec::from_text(&a.text()).unwrap(), a);
        }
    }
}
