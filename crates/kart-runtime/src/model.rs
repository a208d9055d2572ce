//! The vocabulary every stage shares: a config and its values, the kind of an
//! artifact, a tuning problem and how a kernel is tuned. Imports nothing of kart but
//! the checks of untrusted text and the expression language's environment.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

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
///
/// Stored as one shared, sorted slice with interned names: a project of 100,000
/// artifacts holds a config per lock record and per planned artifact, and a map per
/// config would be most of its memory. A clone shares the slice. Order, equality, hash,
/// display and serde are those of the map `BTreeMap<String, ParamValue>` it replaces.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Config(Arc<[(Name, ParamValue)]>);

/// An interned param name.
type Name = Arc<str>;

/// The one copy of a param name: configs of a grid share their names.
fn intern(name: &str) -> Name {
    static NAMES: OnceLock<Mutex<HashSet<Name>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    // A poisoned set still holds valid names.
    let mut names = names.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = names.get(name) {
        return Arc::clone(name);
    }
    let name: Name = Arc::from(name);
    names.insert(Arc::clone(&name));
    name
}

impl Config {
    /// The empty config (a kernel without params).
    pub fn new() -> Config {
        Config::default()
    }

    /// The value of param `name`.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// True when the config has param `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// (name, value) sorted by name.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &ParamValue)> + '_ {
        self.0.iter().map(|(n, v)| (&**n, v))
    }

    /// The param names, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.iter().map(|(n, _)| &**n)
    }

    /// The values, in the order of their names.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &ParamValue> + '_ {
        self.0.iter().map(|(_, v)| v)
    }

    /// How many params.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the config of a kernel without params.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets param `name` to `value`; the value it had, if any.
    pub fn insert(&mut self, name: &str, value: ParamValue) -> Option<ParamValue> {
        let mut pairs = self.0.to_vec();
        let old = match pairs.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) => Some(std::mem::replace(&mut pairs[i].1, value)),
            Err(i) => {
                pairs.insert(i, (intern(name), value));
                None
            }
        };
        self.0 = pairs.into();
        old
    }

    /// Removes param `name`; its value, if it had one.
    pub fn remove(&mut self, name: &str) -> Option<ParamValue> {
        let i = self.0.binary_search_by(|(n, _)| (**n).cmp(name)).ok()?;
        let mut pairs = self.0.to_vec();
        let (_, old) = pairs.remove(i);
        self.0 = pairs.into();
        Some(old)
    }

    /// The config as a map.
    pub fn to_map(&self) -> BTreeMap<String, ParamValue> {
        self.iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    }

    /// True when every (name, value) of `partial` is also in this config.
    pub fn matches(&self, partial: &BTreeMap<String, ParamValue>) -> bool {
        partial.iter().all(|(k, v)| self.get(k) == Some(v))
    }
}

/// As a map's `collect`: sorted by name, the last value of a name repeated wins.
impl<K: AsRef<str>> FromIterator<(K, ParamValue)> for Config {
    fn from_iter<I: IntoIterator<Item = (K, ParamValue)>>(iter: I) -> Config {
        let mut pairs: Vec<(Name, ParamValue)> = iter
            .into_iter()
            .map(|(n, v)| (intern(n.as_ref()), v))
            .collect();
        // Stable: of equal names, the last one given ends up last.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(Name, ParamValue)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match kept.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => kept.push(pair),
            }
        }
        Config(kept.into())
    }
}

impl From<BTreeMap<String, ParamValue>> for Config {
    fn from(map: BTreeMap<String, ParamValue>) -> Config {
        map.into_iter().collect()
    }
}

impl<K: AsRef<str>, const N: usize> From<[(K, ParamValue); N]> for Config {
    fn from(pairs: [(K, ParamValue); N]) -> Config {
        pairs.into_iter().collect()
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Pairs<'a>(&'a Config);
        impl fmt::Debug for Pairs<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter()).finish()
            }
        }
        f.debug_tuple("Config").field(&Pairs(self)).finish()
    }
}

impl Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let map = BTreeMap::<String, ParamValue>::deserialize(d)?;
        if let Some(bad) = map.keys().find(|k| !is_c_identifier(k)) {
            return Err(serde::de::Error::custom(format!(
                "param name {} is not a C identifier",
                crate::untrusted::quoted(bad)
            )));
        }
        Ok(Config::from(map))
    }
}

impl fmt::Display for Config {
    /// `BLOCK_M=64,NUM_WARPS=4`; `-` for the empty config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        for (i, (name, value)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
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
        Config::get(self, name).map(|v| match v {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    type Map = BTreeMap<String, ParamValue>;

    /// Maps of 0 to 3 params over a few names and values, ints and identifiers mixed.
    fn maps() -> Vec<Map> {
        let names = ["A", "BLOCK", "B_2", "a"];
        let values = [
            ParamValue::Int(-3),
            ParamValue::Int(0),
            ParamValue::Int(64),
            ParamValue::Ident("half".into()),
            ParamValue::Ident("ns::f16".into()),
        ];
        let mut maps = vec![Map::new()];
        let mut seed = 7u64;
        for _ in 0..200 {
            let mut map = Map::new();
            for _ in 0..3 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let pick = (seed >> 33) as usize;
                if !pick.is_multiple_of(4) {
                    map.insert(
                        names[pick % names.len()].to_string(),
                        values[(pick / 7) % values.len()].clone(),
                    );
                }
            }
            maps.push(map);
        }
        maps
    }

    #[test]
    fn orders_compares_and_hashes_as_the_map() {
        let maps = maps();
        let configs: Vec<Config> = maps.iter().cloned().map(Config::from).collect();
        let hasher = RandomState::new();
        for (m1, c1) in maps.iter().zip(&configs) {
            assert_eq!(hasher.hash_one(m1), hasher.hash_one(c1), "{m1:?}");
            assert_eq!(c1.len(), m1.len());
            assert_eq!(c1.to_map(), *m1);
            for (m2, c2) in maps.iter().zip(&configs) {
                assert_eq!(m1.cmp(m2), c1.cmp(c2), "{m1:?} against {m2:?}");
                assert_eq!(m1 == m2, c1 == c2);
            }
            for name in ["A", "BLOCK", "B_2", "a", "Z"] {
                assert_eq!(c1.get(name), m1.get(name));
                assert_eq!(c1.contains_key(name), m1.contains_key(name));
            }
            assert!(c1.keys().eq(m1.keys().map(String::as_str)));
            assert!(c1.values().eq(m1.values()));
        }
    }

    #[test]
    fn displays_and_serializes_as_the_map() {
        for map in maps() {
            let config = Config::from(map.clone());
            let shown = if map.is_empty() {
                "-".to_string()
            } else {
                let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
                pairs.join(",")
            };
            assert_eq!(config.to_string(), shown);
            let json = serde_json::to_string(&config).unwrap();
            assert_eq!(json, serde_json::to_string(&map).unwrap());
            assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
            let toml_text = toml::to_string(&config).unwrap();
            assert_eq!(toml_text, toml::to_string(&map).unwrap());
            assert_eq!(toml::from_str::<Config>(&toml_text).unwrap(), config);
            assert_eq!(
                format!("{config:?}"),
                format!("Config({map:?})"),
                "Debug as the tuple struct of a map"
            );
        }
    }

    #[test]
    fn builds_and_edits_as_the_map() {
        let pairs = [
            ("B", ParamValue::Int(1)),
            ("A", ParamValue::Int(2)),
            ("B", ParamValue::Int(3)),
        ];
        let map: Map = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let mut config = Config::from(pairs);
        assert_eq!(
            config.to_map(),
            map,
            "the last value of a name wins, sorted"
        );
        assert_eq!(config.insert("AA", ParamValue::Int(4)), None);
        assert_eq!(
            config.insert("A", ParamValue::Int(5)),
            Some(ParamValue::Int(2))
        );
        assert_eq!(config.to_string(), "A=5,AA=4,B=3");
        assert_eq!(config.remove("AA"), Some(ParamValue::Int(4)));
        assert_eq!(config.remove("AA"), None);
        assert_eq!(config.to_string(), "A=5,B=3");
        let copy = config.clone();
        config.insert("C", ParamValue::Int(0));
        assert_eq!(
            copy.to_string(),
            "A=5,B=3",
            "a clone is not changed by an edit"
        );
        assert!(Config::new().is_empty());
        assert_eq!(Config::new(), Config::from(Map::new()));
        let empty: [(&str, ParamValue); 0] = [];
        assert_eq!(Config::from(empty).to_string(), "-");
    }

    #[test]
    fn refuses_what_the_map_refused() {
        let bad = toml::from_str::<Config>("\"1x\" = 1")
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("param name `1x` is not a C identifier"),
            "{bad}"
        );
        let text = "A = 1\nA = 2";
        let twice = toml::from_str::<Config>(text).unwrap_err().to_string();
        assert_eq!(twice, toml::from_str::<Map>(text).unwrap_err().to_string());
        assert!(twice.contains("duplicate key"), "{twice}");
        let quoted = serde_json::from_str::<Config>(r#"{"A": "12"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            quoted.contains("value \"12\" is a string: write the integer without quotes (12)"),
            "{quoted}"
        );
        // serde_json, like the map, keeps the last of a name given twice.
        let json = r#"{"A": 1, "A": 2}"#;
        assert_eq!(
            serde_json::from_str::<Config>(json).unwrap().to_map(),
            serde_json::from_str::<Map>(json).unwrap()
        );
    }
}
