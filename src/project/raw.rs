//! The shapes `kart.toml` and `kernel.toml` are read into (every key spanned, for
//! errors at line and column), and the checks of values only manifests hold.

use std::collections::BTreeMap;
use std::ops::Range;

use kart_runtime::error::Result;
use kart_runtime::model::ParamValue;
use kart_runtime::target::TargetArch;
use kart_runtime::text::SourceFile;
use kart_runtime::untrusted::{is_c_identifier, is_qualified_name};
use serde::Deserialize;
use toml::Spanned;

/// The checks of values only manifests hold, on a manifest's text.
pub(super) trait ManifestChecks {
    fn check_name(&self, name: &str, span: Range<usize>, what: &str) -> Result<()>;
    fn value(&self, v: &Spanned<RawValue>) -> Result<ParamValue>;
    fn targets(&self, list: &Spanned<Vec<Spanned<String>>>) -> Result<Vec<TargetArch>>;
}

impl ManifestChecks for SourceFile<'_> {
    fn check_name(&self, name: &str, span: Range<usize>, what: &str) -> Result<()> {
        if is_c_identifier(name) {
            Ok(())
        } else {
            Err(self.error(
                span,
                format!("{what} name `{name}` is not a C identifier"),
                "it becomes `-DNAME=VALUE`: use letters, digits and `_`, not starting with a digit",
            ))
        }
    }

    fn value(&self, v: &Spanned<RawValue>) -> Result<ParamValue> {
        match v.get_ref() {
            RawValue::Int(i) => Ok(ParamValue::Int(*i)),
            RawValue::Bool(b) => Ok(ParamValue::Ident(b.to_string())),
            RawValue::Text(s) if is_qualified_name(s) => Ok(ParamValue::Ident(s.clone())),
            RawValue::Text(s) if s.trim().parse::<i64>().is_ok() => Err(self.error(
                v.span(),
                format!("value \"{s}\" is a string, and kart keeps integers and names apart"),
                format!("write the integer without quotes: {}", s.trim()),
            )),
            RawValue::Text(s) => Err(self.error(
                v.span(),
                format!("value `{s}` is neither an integer nor a name"),
                "values become `-DNAME=VALUE` or template arguments: write an integer or a name such as `half` or `lib::Mode::B`",
            )),
            RawValue::Other(_) => Err(self.error(
                v.span(),
                "values must be integers or identifier strings",
                "write e.g. `64` or `\"half\"`",
            )),
        }
    }

    fn targets(&self, list: &Spanned<Vec<Spanned<String>>>) -> Result<Vec<TargetArch>> {
        let mut targets = Vec::new();
        for t in list.get_ref() {
            let target: TargetArch =
                t.get_ref().parse().map_err(|e: crate::target::BadTarget| {
                    self.error(
                        t.span(),
                        e.0,
                        "see `nvcc --list-gpu-code` for the ones nvcc knows",
                    )
                })?;
            if targets.contains(&target) {
                return Err(self.error(
                    t.span(),
                    format!("target `{target}` is listed twice"),
                    "remove the repeated target",
                ));
            }
            targets.push(target);
        }
        Ok(targets)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProject {
    pub(super) project: RawProjectSection,
    pub(super) toolchain: Option<RawToolchain>,
    pub(super) remote: Option<RawRemote>,
    pub(super) executor: Option<RawExecutor>,
    #[serde(default)]
    pub(super) library: BTreeMap<Spanned<String>, Spanned<RawLibrary>>,
    #[serde(default)]
    pub(super) fleet: Vec<super::fleet::RawFleetGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProjectSection {
    pub(super) kernels: Option<Spanned<String>>,
    pub(super) store: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) store_outside_project: bool,
    pub(super) targets: Spanned<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolchain {
    pub(super) nvcc: Option<String>,
    #[serde(default)]
    pub(super) components: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLibrary {
    pub(super) pip: Option<Spanned<String>>,
    pub(super) include: Option<Spanned<String>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) sha256: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRemote {
    pub(super) url: Spanned<String>,
    #[serde(default)]
    pub(super) trusted: bool,
    #[serde(default)]
    pub(super) read_only: bool,
    pub(super) endpoint: Option<Spanned<String>>,
    pub(super) region: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) anonymous: bool,
    pub(super) connect_timeout: Option<Spanned<f64>>,
    pub(super) first_byte_timeout: Option<Spanned<f64>>,
    pub(super) stall_timeout: Option<Spanned<f64>>,
    pub(super) give_up_after: Option<Spanned<f64>>,
    pub(super) min_rate: Option<Spanned<f64>>,
    pub(super) budget: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExecutor {
    pub(super) url: Spanned<String>,
    pub(super) jobs: Option<Spanned<i64>>,
    pub(super) timeout: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKernel {
    pub(super) name: Spanned<String>,
    pub(super) sources: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(super) include: Vec<Spanned<String>>,
    pub(super) entry: Spanned<Vec<Spanned<String>>>,
    pub(super) targets: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) flags: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) defines: BTreeMap<Spanned<String>, Spanned<RawValue>>,
    #[serde(default)]
    pub(super) ptx: bool,
    #[serde(default)]
    pub(super) params: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<RawValue>>>>,
    #[serde(default)]
    pub(super) exclude: Vec<Spanned<BTreeMap<Spanned<String>, Spanned<RawValue>>>>,
    #[serde(default)]
    pub(super) signature: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<String>>>>,
    pub(super) default: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawValue>>>>,
    pub(super) tune: Option<RawTune>,
    #[serde(default)]
    pub(super) require: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) derived: BTreeMap<Spanned<String>, Spanned<String>>,
    pub(super) launch: Option<RawLaunch>,
    pub(super) variant_of: Option<Spanned<String>>,
    pub(super) param_macros: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) libraries: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) define_params: Vec<Spanned<String>>,
    pub(super) prelude: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) problem_params: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub(super) launch_params: Vec<Spanned<String>>,
    pub(super) prune: Option<Spanned<super::prune::RawPrune>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLaunch {
    pub(super) grid: Spanned<Vec<Spanned<String>>>,
    pub(super) block: Spanned<Vec<Spanned<String>>>,
    pub(super) shared_mem: Option<Spanned<String>>,
    /// Thread-block cluster: 1 to 3 expressions or integers.
    pub(super) cluster: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    /// Programmatic dependent launch: a bool, an integer or an expression.
    pub(super) pdl: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub(super) args: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<toml::Value>>>>,
    /// The problem's keys, for a kernel without `[tune]` (whose keys they are).
    #[serde(default)]
    pub(super) problem: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTune {
    #[serde(default)]
    pub(super) exact: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub(super) nearest: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) program: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawValue {
    Int(i64),
    Text(String),
    /// `true`/`false`: the names `true` and `false` as values; in `defines`, a macro
    /// defined without a value or not defined.
    Bool(bool),
    Other(serde::de::IgnoredAny),
}
