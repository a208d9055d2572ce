//! `[prune]` after compile: a config of which any artifact (any target, any kind)
//! exceeds a bound of its kernel's `[prune]` is left out of the lock whole, so that
//! `best()` and `select` never see half a config. Its artifacts are recorded as
//! `[[pruned]]` with the resources that decided, so that `kart build --locked` checks
//! the decision on a machine without the store, and a later build decides without
//! compiling them again. The blobs stay in the store: loosening a bound brings a
//! config back without a compile.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::Config;
use crate::pipeline::plan::Planned;
use crate::project::prune::Exceeded;
use crate::store::ActionEntry;
use crate::store::lockfile::{Lockfile, PrunedArtifact, Resources};
use crate::workspace::Workspace;

/// What `[prune]` decided for a plan.
#[derive(Default)]
pub(super) struct Pruning {
    /// (kernel index, config) of every config left out.
    configs: HashSet<(usize, Config)>,
    /// The lock's records: each artifact of a pruned config whose resources are known.
    pub(super) records: Vec<PrunedArtifact>,
    /// Per kernel index and bound: the bound, and per pruned config the worst value
    /// seen with where.
    seen: BTreeMap<usize, BTreeMap<&'static str, (u64, Vec<String>)>>,
}

impl Pruning {
    /// Whether `[prune]` leaves out `p`'s config.
    pub(super) fn contains(&self, p: &Planned) -> bool {
        !self.configs.is_empty() && self.configs.contains(&(p.kernel, p.config.clone()))
    }

    /// Whether nothing was pruned.
    pub(super) fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// One line per kernel of `kernels` and bound: how many configs it pruned and the
    /// values seen (`live: 2 config(s) pruned by [prune] max_spill_bytes = 0 (52 bytes
    /// of spills on sm_90 in N=16; …)`).
    pub(super) fn notes(&self, ws: &Workspace, kernels: &HashSet<usize>) -> Vec<String> {
        const SHOWN: usize = 3;
        let mut out = Vec::new();
        for (k, rules) in &self.seen {
            if !kernels.contains(k) {
                continue;
            }
            for (rule, (limit, examples)) in rules {
                let mut shown: Vec<String> = examples.iter().take(SHOWN).cloned().collect();
                if examples.len() > SHOWN {
                    shown.push(format!("{} more", examples.len() - SHOWN));
                }
                out.push(format!(
                    "{}: {} config(s) pruned by [prune] {rule} = {limit} ({})",
                    ws.project.kernels[*k].name,
                    examples.len(),
                    shown.join("; ")
                ));
            }
        }
        out
    }
}

/// Decides, for every config of a kernel with `[prune]`, from the resources of its
/// artifacts that `resources_of` knows: pruned when one exceeds a bound. `planned` is
/// sorted as the lock is, so a config's artifacts are one run.
pub(super) fn decide(
    ws: &Workspace,
    planned: &[Planned],
    resources_of: &dyn Fn(&Planned) -> Option<Resources>,
) -> Pruning {
    let mut out = Pruning::default();
    for group in planned.chunk_by(|a, b| a.kernel == b.kernel && a.config == b.config) {
        let first = &group[0];
        let kernel = &ws.project.kernels[first.kernel];
        let Some(rules) = &kernel.prune else {
            continue;
        };
        let known: Vec<(&Planned, Resources)> = group
            .iter()
            .filter_map(|p| resources_of(p).map(|r| (p, r)))
            .collect();
        // Per bound, the largest value of any artifact, with its target.
        let mut worst: BTreeMap<&'static str, (Exceeded, String)> = BTreeMap::new();
        for (p, r) in &known {
            for e in rules.exceeded(r) {
                let slot = worst
                    .entry(e.rule)
                    .or_insert_with(|| (e, p.target.to_string()));
                if e.value > slot.0.value {
                    *slot = (e, p.target.to_string());
                }
            }
        }
        if worst.is_empty() {
            continue;
        }
        out.configs.insert((first.kernel, first.config.clone()));
        out.records.extend(known.iter().map(|(p, r)| {
            PrunedArtifact::new(
                kernel.name.clone(),
                p.config.clone(),
                p.target.to_string(),
                p.kind,
                p.key.clone(),
                *r,
            )
        }));
        let seen = out.seen.entry(first.kernel).or_default();
        for (rule, (e, target)) in worst {
            seen.entry(rule)
                .or_insert_with(|| (e.limit, Vec::new()))
                .1
                .push(format!(
                    "{} on {target} in {}",
                    e.value_text(),
                    first.config
                ));
        }
    }
    out
}

/// Whether any kernel of the project has `[prune]`.
pub(super) fn any(ws: &Workspace) -> bool {
    ws.project.kernels.iter().any(|k| k.prune.is_some())
}

/// The resources the old lock records, by key: of its artifacts and of its pruned
/// artifacts.
pub(super) fn recorded(old: &Lockfile) -> HashMap<&str, Resources> {
    let mut out: HashMap<&str, Resources> = old
        .pruned
        .iter()
        .map(|p| (p.key.as_str(), p.resources()))
        .collect();
    out.extend(
        old.artifacts
            .iter()
            .map(|a| (a.key.as_str(), Resources::of(&a.entries))),
    );
    out
}

/// After the compiles: the resources of an artifact from its action entry (the
/// store's, else one a trusted remote gave), else from the old lock.
pub(super) fn after_compile(
    ws: &Workspace,
    planned: &[Planned],
    old: &Lockfile,
    from_remote: &HashMap<String, ActionEntry>,
) -> Pruning {
    if !any(ws) {
        return Pruning::default();
    }
    let recorded = recorded(old);
    decide(ws, planned, &|p| {
        ws.project.kernels[p.kernel].prune.as_ref()?;
        match ws.store.get_entry(&p.key) {
            Ok(Some(entry)) => Some(Resources::of(&entry.entries)),
            _ => from_remote
                .get(&p.key)
                .map(|e| Resources::of(&e.entries))
                .or_else(|| recorded.get(p.key.as_str()).copied()),
        }
    })
}

/// One record of the lock for a planned artifact, as `--locked` sees it: its
/// resources and whether the lock prunes it.
pub(super) struct Listed<'a> {
    pub(super) planned: &'a Planned,
    pub(super) resources: Resources,
    pub(super) pruned: bool,
}

/// `--locked`: for each config (a run of `listed`, whose keys all equal the plan's),
/// the lock's decision must be `[prune]`'s on the lock's own numbers. One line per
/// config that disagrees.
pub(super) fn check_decisions(ws: &Workspace, listed: &[Listed<'_>]) -> Vec<String> {
    let mut problems = Vec::new();
    let same = |a: &Listed<'_>, b: &Listed<'_>| {
        a.planned.kernel == b.planned.kernel && a.planned.config == b.planned.config
    };
    for group in listed.chunk_by(same) {
        let p = group[0].planned;
        let kernel = &ws.project.kernels[p.kernel];
        let lock_prunes = group.iter().filter(|l| l.pruned).count();
        if kernel.prune.is_none() && lock_prunes == 0 {
            continue;
        }
        let name = format!("{}[{}]", kernel.name, p.config);
        let why = kernel.prune.as_ref().and_then(|rules| {
            group.iter().find_map(|l| {
                rules.exceeded(&l.resources).first().map(|e| {
                    format!(
                        "{} on {} is over {} = {}",
                        e.value_text(),
                        l.planned.target,
                        e.rule,
                        e.limit
                    )
                })
            })
        });
        if lock_prunes > 0 && lock_prunes < group.len() {
            problems.push(format!(
                "{name}: kart.lock lists some of its artifacts and prunes others"
            ));
        } else if let Some(why) = why.as_ref().filter(|_| lock_prunes == 0) {
            problems.push(format!(
                "{name}: [prune] leaves it out ({why}), but kart.lock lists it"
            ));
        } else if why.is_none() && lock_prunes > 0 {
            problems.push(format!(
                "{name}: kart.lock leaves it out as pruned, but [prune] keeps it"
            ));
        }
    }
    problems
}
