//! A kernel as kart knows it once its `kernel.toml` is read and checked: what to
//! compile, its grid, its entries, how it is launched and tuned.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kart_runtime::expr::ExprError;
use kart_runtime::launch::LaunchSpec;
use kart_runtime::model::{Config, ParamValue, TuneSpec};
use kart_runtime::signature::ParamKind;
use kart_runtime::target::TargetArch;

use crate::error::{Error, Result};
use crate::project::entry::TemplateEntry;
use crate::project::grid::{Derived, Grid, GridError, GridReport, Rule, RuleOrDerived};

/// Which params reach the source as `-D NAME=VALUE` macros (`param_macros` in
/// kernel.toml). Fixed `[defines]` are always macros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParamMacros {
    /// Every param and derived param except those a template entry uses: each value
    /// reaches the source once, and a template parameter may share a param's name.
    #[default]
    Auto,
    /// Every param and derived param, template entries or not.
    All,
    /// None: params reach the source only through template entries.
    None,
}

impl ParamMacros {
    pub(crate) fn parse(s: &str) -> Option<ParamMacros> {
        match s {
            "auto" => Some(ParamMacros::Auto),
            "all" => Some(ParamMacros::All),
            "none" => Some(ParamMacros::None),
            _ => None,
        }
    }

    /// Its name in kernel.toml.
    pub fn name(self) -> &'static str {
        match self {
            ParamMacros::Auto => "auto",
            ParamMacros::All => "all",
            ParamMacros::None => "none",
        }
    }
}

/// A parsed and validated kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Its name (a C identifier, unique in the project).
    pub name: String,
    /// Its folder, relative to the project root.
    pub dir: PathBuf,
    /// Its `kernel.toml`, relative to the project root.
    pub manifest: PathBuf,
    /// Source files relative to the project root; the first one is compiled.
    pub sources: Vec<PathBuf>,
    /// Declared include folders, relative to the project root.
    pub include: Vec<PathBuf>,
    /// The names callers find entries by, in order: an `extern "C"` symbol, or a
    /// template entry's name before its arguments (`gemm` for `gemm<BLOCK_M, BLOCK_N>`).
    pub entry: Vec<String>,
    /// Template entries by name: instantiated per config, found by demangling.
    pub templates: BTreeMap<String, TemplateEntry>,
    /// Which params reach the source as `-D` macros.
    pub param_macros: ParamMacros,
    /// Header libraries of `kart.toml` this kernel includes, by name.
    pub libraries: Vec<String>,
    /// Targets to build (the kernel's own list, else the project's).
    pub targets: Vec<TargetArch>,
    /// Extra nvcc flags, in order.
    pub flags: Vec<String>,
    /// Fixed defines.
    pub defines: BTreeMap<String, ParamValue>,
    /// Fixed macros defined without a value (`defines = { ENABLE_BF16 = true }`).
    pub defined: BTreeSet<String>,
    /// Params whose value names the macro a config defines without a value
    /// (`define_params`): `PRECISION = "ENABLE_BF16"` passes `-DENABLE_BF16`; `true`
    /// defines the param's own name, `false` nothing.
    pub define_params: BTreeSet<String>,
    /// Lines of C++ placed in the generated unit after the source's `#include` and
    /// before the instantiations (`prelude`): `using namespace lib;`, includes, aliases.
    pub prelude: Option<String>,
    /// Also keep the PTX of each config.
    pub ptx: bool,
    /// The grid: param → values in the order written.
    pub params: BTreeMap<String, Vec<ParamValue>>,
    /// Partial assignments never built.
    pub exclude: Vec<BTreeMap<String, ParamValue>>,
    /// Declared parameter kinds per entry (`[signature]`), checked against the cubin.
    pub signature: BTreeMap<String, Vec<ParamKind>>,
    /// The config to use when nothing better is known (`default = { … }`): exported by
    /// default, and `best()`'s answer on a GPU with no tuning record.
    pub default: Option<Config>,
    /// How tuning problems map onto configs (`[tune]`), if the kernel is tuned.
    pub tune: Option<TuneSpec>,
    /// `require`: rules every built config satisfies.
    pub require: Vec<Rule>,
    /// `[derived]`: params computed from each config, in evaluation order.
    pub derived: Vec<Derived>,
    /// `[launch]`: grid, block and shared memory from a config and a problem.
    pub launch: Option<LaunchSpec>,
    /// `variant_of = "NAME"`: this kernel is another implementation of `NAME`, called
    /// the same way (same entries and call signatures, same tuning problem); `best()`
    /// and resolution choose among the base and its variants.
    pub variant_of: Option<VariantOf>,
    /// Derived params the kernel's sources declare themselves (`constexpr uint W = …`,
    /// `#define W`): never passed as macros under `param_macros = "auto"`.
    pub declared_in_source: BTreeSet<String>,
    /// Params and derived params that neither the kernel's sources nor the files of its
    /// include folders mention: never passed as macros under `param_macros = "auto"`
    /// (a macro nobody reads changes nothing but the command line, and would keep
    /// configs from sharing one compile).
    pub unmentioned: BTreeSet<String>,
    /// `[problem_params]`: params whose values come from problems (`kart build
    /// --problems FILE` / `--trace FILE`), each with the problem key it takes. Without
    /// problems such a param has no value, and the kernel no config.
    pub problem_params: BTreeMap<String, String>,
    /// With several problem params, the combinations of their values the problems
    /// have: a config is built only for one of them (empty: no such restriction).
    pub problem_combos: Vec<BTreeMap<String, ParamValue>>,
    /// `launch_params`: params that change only the launch. They reach no compile
    /// input and are not part of the action key, so configs that differ only in them
    /// share one compile and one artifact.
    pub launch_params: BTreeSet<String>,
    /// The params of `launch_params` that kernel.toml does not declare: found to reach
    /// no compile input (not a template argument, not used by `[derived]`, not a
    /// define param, not a `-D` macro), so treated as declared.
    pub launch_params_found: BTreeSet<String>,
    /// `[prune]`: bounds on each artifact's resources; a config of which an artifact
    /// exceeds one is left out of the lock after compile. Not part of any key.
    pub prune: Option<crate::project::prune::Prune>,
    /// The configs the grid keeps, computed once when the kernel is loaded (a grid of
    /// thousands of combinations is not filtered again by every later step).
    pub kept: std::sync::OnceLock<Vec<Config>>,
}

/// Where a kernel says `variant_of`, for the project-wide checks' messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariantOf {
    /// The base kernel's name.
    pub base: String,
    /// Line of the key in kernel.toml.
    pub line: usize,
    /// Column.
    pub column: usize,
}

impl Kernel {
    /// The flag that makes nvcc write line information (and with it the folder it ran
    /// in) into the cubin, if the kernel's flags have one.
    pub fn line_info_flag(&self) -> Option<&str> {
        self.flags.iter().map(String::as_str).find(|f| {
            matches!(
                *f,
                "-lineinfo" | "--generate-line-info" | "-G" | "--device-debug"
            )
        })
    }

    /// Every config of the grid that `[[exclude]]` and `require` keep, in a stable
    /// order.
    /// Rules and derived params are evaluated over the whole grid when the kernel is
    /// loaded (with the failing expression's line); one that fails here means a kernel
    /// built without that check, and is an error rather than an empty grid.
    /// Computed once and kept: every call after the first lends the same configs.
    pub fn configs(&self) -> Result<&[Config]> {
        if let Some(kept) = self.kept.get() {
            return Ok(kept);
        }
        let (_, configs) = self.grid_report().map_err(|e| {
            let what = match e.at {
                RuleOrDerived::Rule(i) => format!("`require` rule {}", i + 1),
                RuleOrDerived::Derived(i) => format!("derived param `{}`", self.derived[i].name),
            };
            self.unevaluable(&e.config, &what, &e.error)
        })?;
        Ok(self.kept.get_or_init(|| configs))
    }

    /// The error of an expression of this kernel that cannot be evaluated on `config`.
    fn unevaluable(&self, config: &Config, what: &str, error: &ExprError) -> Error {
        Error::usage(
            format!(
                "{}: kernel `{}`, config {config}: {what} cannot be evaluated: {error}",
                self.manifest.display(),
                self.name
            ),
            Some("fix the expression in kernel.toml; no action key is computed without it".into()),
        )
    }
}

impl Kernel {
    /// The grid's params, exclusions, rules and derived params.
    pub fn grid(&self) -> Grid<'_> {
        Grid {
            params: &self.params,
            exclude: &self.exclude,
            require: &self.require,
            derived: &self.derived,
            combos: &self.problem_combos,
        }
    }

    /// The derived params of `config`, in evaluation order.
    pub fn derived_values(
        &self,
        config: &Config,
    ) -> Result<BTreeMap<String, i64>, (usize, ExprError)> {
        self.grid().derived_values(config)
    }

    /// Whether `config` passes every `require` rule.
    pub fn satisfies(&self, config: &Config) -> Result<bool, (RuleOrDerived, ExprError)> {
        self.grid().satisfies(config)
    }

    /// How the grid narrows, and the configs it keeps.
    pub fn grid_report(&self) -> Result<(GridReport, Vec<Config>), GridError> {
        self.grid().report()
    }

    /// The derived params of `config`, or the error naming the one that fails: these
    /// values reach the source and the action key, so none may be silently missing.
    pub fn derived_or_error(&self, config: &Config) -> Result<BTreeMap<String, i64>> {
        self.derived_values(config).map_err(|(i, e)| {
            self.unevaluable(
                config,
                &format!("derived param `{}`", self.derived[i].name),
                &e,
            )
        })
    }

    /// Every param and derived param of `config`, as the text the source sees.
    pub fn param_texts(&self, config: &Config) -> Result<BTreeMap<String, String>> {
        let mut values: BTreeMap<String, String> = config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, v) in self.derived_or_error(config)? {
            values.insert(k, v.to_string());
        }
        Ok(values)
    }

    /// The params and derived params passed as `-D NAME=VALUE`, per `param_macros`.
    pub fn macro_params(&self, config: &Config) -> Result<Vec<(String, String)>> {
        let values = self.param_texts(config)?;
        let in_templates: BTreeSet<String> = match self.param_macros {
            ParamMacros::All => BTreeSet::new(),
            ParamMacros::None => return Ok(Vec::new()),
            // A value reaches the source once: not as a macro when a template entry
            // takes it, nor when the source computes a derived param of that name; and
            // not at all when nothing the kernel compiles mentions it.
            ParamMacros::Auto => self
                .templates
                .values()
                .flat_map(|t| t.uses(values.keys().map(String::as_str)))
                .chain(self.declared_in_source.iter().cloned())
                .chain(self.unmentioned.iter().cloned())
                .collect(),
        };
        // A define param's value names a macro of its own (see `bare_macros`).
        let in_templates: BTreeSet<String> = in_templates
            .into_iter()
            .chain(self.define_params.iter().cloned())
            .collect();
        // Params first, then derived params, each in name order (as before templates).
        let params = config.keys();
        let derived = values
            .keys()
            .map(String::as_str)
            .filter(|k| !config.contains_key(k));
        Ok(params
            .chain(derived)
            .filter(|k| !in_templates.contains(*k))
            .map(|k| (k.to_string(), values[k].clone()))
            .collect())
    }

    /// The macros `config` defines without a value, `-DNAME` each, in name order: the
    /// fixed ones (`defines = { NAME = true }`) and those its define params choose.
    pub fn bare_macros(&self, config: &Config) -> Vec<String> {
        let mut names: BTreeSet<String> = self.defined.clone();
        for param in &self.define_params {
            match config.get(param) {
                Some(ParamValue::Ident(v)) if v == "true" => {
                    names.insert(param.clone());
                }
                Some(ParamValue::Ident(v)) if v == "false" => {}
                Some(ParamValue::Ident(v)) => {
                    names.insert(v.clone());
                }
                // Checked when kernel.toml is read: a define param's values are names.
                Some(ParamValue::Int(_)) | None => {}
            }
        }
        names.into_iter().collect()
    }

    /// Each template entry with its instance for `config`, in entry order.
    pub fn template_instances(&self, config: &Config) -> Result<Vec<(&TemplateEntry, String)>> {
        if self.templates.is_empty() {
            return Ok(Vec::new());
        }
        let values = self.param_texts(config)?;
        Ok(self
            .entry
            .iter()
            .filter_map(|name| self.templates.get(name))
            .map(|t| (t, t.instance(&values)))
            .collect())
    }
}
