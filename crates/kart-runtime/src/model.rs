//! The vocabulary every stage shares: a config and its values, the kind of an
//! artifact, a tuning problem and how a kernel is tuned. Imports nothing of kart but
//! the checks of untrusted text and the expression language's environment.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::expr::{Env, Value};
use crate::untrusted::{is_c_identifier, is_qualified_name};

/// The value of a param or define: an integer or a C identifier. Read from any file
/// (kernel.toml, the lock, entries, sidecars) it is checked to be one: the value
/// reaches nvcc's command line, which nvcc hands to a shell.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// `-DNAME=128`
    Int(i64),
    /// `-DNAME=half`
    Ident(String),
}

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(ParamValue::Int(v)),
            Raw::Text(s) if is_qualified_name(&s) => Ok(ParamValue::Ident(s)),
            Raw::Text(s) if s.trim().parse::<i64>().is_ok() => {
                Err(serde::de::Error::custom(format!(
                    "value \"{}\" is a string: write the integer without quotes ({})",
                    s,
                    s.trim()
                )))
            }
            Raw::Text(s) => Err(serde::de::Error::custom(format!(
                "value {} is neither an integer nor a name (a C identifier, or `ns::name`)",
                crate::untrusted::quoted(&s)
            ))),
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Ident(s) => f.write_str(s),
        }
    }
}

impl ParamValue {
    /// Parses a command-line value: an integer if it is one, else an identifier.
    pub fn parse(text: &str) -> Option<ParamValue> {
        if let Ok(v) = text.parse::<i64>() {
            Some(ParamValue::Int(v))
        } else if is_qualified_name(text) {
            Some(ParamValue::Ident(text.to_string()))
        } else {
            None
        }
    }
}

/// One point of a kernel's param grid: param name → value, sorted by name. Read from a
/// file, every name must be a C identifier (it becomes `-DNAME=…`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Config(pub BTreeMap<String, ParamValue>);

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let map = BTreeMap::<String, ParamValue>::deserialize(d)?;
        if let Some(bad) = map.keys().find(|k| !is_c_identifier(k)) {
            return Err(serde::de::Error::custom(format!(
                "param name {} is not a C identifier",
                crate::untrusted::quoted(bad)
            )));
        }
        Ok(Config(map))
    }
}

impl fmt::Display for Config {
    /// `BLOCK_M=64,NUM_WARPS=4`; `-` for the empty config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        for (i, (name, value)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

impl Config {
    /// True when every (name, value) of `partial` is also in this config.
    pub fn matches(&self, partial: &BTreeMap<String, ParamValue>) -> bool {
        partial.iter().all(|(k, v)| self.0.get(k) == Some(v))
    }
}

/// A kernel's `[tune]` table: the integer keys of a problem, which of them a config
/// must match exactly (through a param) and which match the nearest recorded value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TuneSpec {
    /// Param → problem key it must equal (`HEAD_DIM = "D"`).
    pub exact: BTreeMap<String, String>,
    /// Problem keys matched to the nearest recorded value (`["B", "H", "S"]`).
    pub nearest: Vec<String>,
    /// The kernel's tuning program and its arguments, run from the project root by
    /// `kart tune --run` (`["target/release/examples/flash_attn", "tune"]`).
    pub program: Vec<String>,
}

/// A tuning problem: named integers (`B`, `H`, `S`, `D`, `causal`).
pub type Problem = BTreeMap<String, i64>;

/// What kind of file an artifact is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    /// Machine code for one real architecture, loaded with no JIT.
    Cubin,
    /// PTX for the target's virtual architecture; JIT-compiled by the driver, so only
    /// loaded when the caller allows JIT.
    Ptx,
}

impl std::fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArtifactKind::Cubin => "cubin",
            ArtifactKind::Ptx => "ptx",
        })
    }
}

impl Env for Config {
    fn get(&self, name: &str) -> Option<Value<'_>> {
        self.0.get(name).map(|v| match v {
            ParamValue::Int(i) => Value::Int(*i),
            ParamValue::Ident(s) => Value::Ident(s),
        })
    }
}

/// Parses `NAME=VALUE` from the command line.
pub fn parse_param(text: &str) -> std::result::Result<(String, ParamValue), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let value = ParamValue::parse(value.trim())
        .ok_or_else(|| format!("`{value}` is neither an integer nor an identifier"))?;
    Ok((name.trim().to_string(), value))
}
