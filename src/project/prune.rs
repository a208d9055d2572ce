//! `[prune]` in kernel.toml: bounds on what ptxas reports for each compiled artifact
//! (spills, registers, static shared memory, stack). A config of which any artifact
//! exceeds a bound is left out of the lock after compile; the bounds are not part of
//! any action key (pruning changes no cubin).

use kart_runtime::error::Result;
use kart_runtime::store::lockfile::Resources;
use kart_runtime::text::SourceFile;
use serde::Deserialize;
use toml::Spanned;

/// `[prune]` as written: each key optional, each a non-negative integer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrune {
    max_spill_bytes: Option<Spanned<i64>>,
    max_registers: Option<Spanned<i64>>,
    max_shared_bytes: Option<Spanned<i64>>,
    max_stack_bytes: Option<Spanned<i64>>,
}

/// The bounds of `[prune]`, each over the values `kart ls` shows for an artifact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prune {
    /// `max_spill_bytes`: spill stores and loads together, all entries (`0`: no spill).
    pub max_spill_bytes: Option<u64>,
    /// `max_registers`: registers per thread of any entry.
    pub max_registers: Option<u64>,
    /// `max_shared_bytes`: static shared memory of any entry.
    pub max_shared_bytes: Option<u64>,
    /// `max_stack_bytes`: stack frame per thread of any entry.
    pub max_stack_bytes: Option<u64>,
}

/// One bound an artifact exceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Exceeded {
    /// The key of `[prune]` (`max_spill_bytes`).
    pub rule: &'static str,
    /// Its bound.
    pub limit: u64,
    /// The artifact's value.
    pub value: u64,
}

impl Exceeded {
    /// The value in words: `2536 bytes of spills`, `96 registers`.
    pub fn value_text(&self) -> String {
        let v = self.value;
        match self.rule {
            "max_spill_bytes" => format!("{v} bytes of spills"),
            "max_registers" => format!("{v} registers"),
            "max_shared_bytes" => format!("{v} bytes of static shared memory"),
            _ => format!("{v} bytes of stack"),
        }
    }
}

impl Prune {
    /// The bounds set, as (key, bound), in the order of the README.
    pub fn rules(&self) -> Vec<(&'static str, u64)> {
        [
            ("max_spill_bytes", self.max_spill_bytes),
            ("max_registers", self.max_registers),
            ("max_shared_bytes", self.max_shared_bytes),
            ("max_stack_bytes", self.max_stack_bytes),
        ]
        .into_iter()
        .filter_map(|(name, bound)| bound.map(|b| (name, b)))
        .collect()
    }

    /// The bounds an artifact with resources `r` exceeds (none: it is kept).
    pub fn exceeded(&self, r: &Resources) -> Vec<Exceeded> {
        self.rules()
            .into_iter()
            .filter_map(|(rule, limit)| {
                let value = match rule {
                    "max_spill_bytes" => r.spill_bytes,
                    "max_registers" => u64::from(r.registers),
                    "max_shared_bytes" => r.shared_bytes,
                    _ => r.stack_bytes,
                };
                (value > limit).then_some(Exceeded { rule, limit, value })
            })
            .collect()
    }

    /// `max_spill_bytes = 0, max_registers = 128`, for messages.
    pub fn text(&self) -> String {
        let parts: Vec<String> = self
            .rules()
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        parts.join(", ")
    }
}

/// `[prune]`: `None` when absent or empty; each bound a non-negative integer.
pub(super) fn prune(
    file: &SourceFile<'_>,
    raw: Option<&Spanned<RawPrune>>,
) -> Result<Option<Prune>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let bound = |v: &Option<Spanned<i64>>, name: &str| -> Result<Option<u64>> {
        let Some(v) = v else {
            return Ok(None);
        };
        u64::try_from(*v.get_ref()).map(Some).map_err(|_| {
            file.error(
                v.span(),
                format!("`{name} = {}` is negative", v.get_ref()),
                format!(
                    "a bound of [prune] is a number of bytes or registers, 0 or more: `{name} = 0` prunes every config that has any"
                ),
            )
        })
    };
    let r = raw.get_ref();
    let prune = Prune {
        max_spill_bytes: bound(&r.max_spill_bytes, "max_spill_bytes")?,
        max_registers: bound(&r.max_registers, "max_registers")?,
        max_shared_bytes: bound(&r.max_shared_bytes, "max_shared_bytes")?,
        max_stack_bytes: bound(&r.max_stack_bytes, "max_stack_bytes")?,
    };
    Ok((!prune.rules().is_empty()).then_some(prune))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_is_pruned_by_each_bound_it_exceeds() {
        let prune = Prune {
            max_spill_bytes: Some(0),
            max_registers: Some(64),
            ..Prune::default()
        };
        let spills = Resources {
            registers: 32,
            spill_bytes: 52,
            ..Resources::default()
        };
        assert_eq!(
            prune.exceeded(&spills),
            [Exceeded {
                rule: "max_spill_bytes",
                limit: 0,
                value: 52
            }]
        );
        let both = Resources {
            registers: 65,
            spill_bytes: 8,
            ..Resources::default()
        };
        assert_eq!(prune.exceeded(&both).len(), 2);
        let at_the_bound = Resources {
            registers: 64,
            ..Resources::default()
        };
        assert!(prune.exceeded(&at_the_bound).is_empty());
        assert_eq!(prune.text(), "max_spill_bytes = 0, max_registers = 64");
    }
}
