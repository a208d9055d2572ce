//! Planning: every artifact of the project with its action key, and the part of them a
//! command selects.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::digest::Preimage;
use crate::error::{Error, Result};
use crate::model::ArtifactKind;
use crate::model::{Config, ParamValue};
use crate::pipeline::key::{action_key, action_preimage, kernel_input_files};
use crate::pipeline::reporter::BuildReporter;
use crate::project::{Kernel, Project};
use crate::store::ActionEntry;
use crate::store::lockfile::describe;
use crate::target::TargetArch;
use crate::toolchain::Toolchain;
use crate::workspace::Workspace;

/// Which artifacts a command is about. Empty lists mean "all".
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Kernel names.
    pub kernels: Vec<String>,
    /// `NAME=VALUE` filters on params.
    pub params: BTreeMap<String, ParamValue>,
    /// Targets.
    pub targets: Vec<TargetArch>,
}

/// One artifact of the project with its action key.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Index into `project.kernels`.
    pub kernel: usize,
    /// The config.
    pub config: Config,
    /// The target.
    pub target: TargetArch,
    /// cubin or PTX.
    pub kind: ArtifactKind,
    /// The kernel's input files with their sha256, shared by its artifacts: with the
    /// rest of the plan, what [`Planned::preimage`] computes the inputs again from.
    pub files: Arc<BTreeMap<String, String>>,
    /// The digest of its inputs. The inputs themselves (a few kilobytes) are not kept:
    /// a plan of 100,000 artifacts would hold hundreds of megabytes of them.
    pub key: String,
    /// The config's derived params.
    pub derived: BTreeMap<String, i64>,
}

impl Planned {
    /// Every input of the artifact, computed again (what its key is the digest of); an
    /// error if they no longer give its key.
    pub fn preimage(&self, ws: &Workspace, toolchain: &Toolchain) -> Result<Preimage> {
        let project = &ws.project;
        let kernel = &project.kernels[self.kernel];
        let preimage = action_preimage(
            &project.root,
            toolchain,
            kernel,
            &self.config,
            self.target,
            self.kind,
            &self.files,
        )?;
        if action_key(&preimage) != self.key {
            return Err(Error::CheckFailed {
                message: format!(
                    "the inputs of {} changed while kart ran (its key is not the one planned)",
                    self.describe(project)
                ),
                hint: Some("run the command again once the sources stop changing".into()),
            });
        }
        Ok(preimage)
    }

    pub(crate) fn describe(&self, project: &Project) -> String {
        describe(
            &project.kernels[self.kernel].name,
            &self.config,
            &self.target.to_string(),
            self.kind,
        )
    }

    fn sort_key<'a>(&'a self, project: &'a Project) -> (&'a str, &'a Config, String, ArtifactKind) {
        (
            &project.kernels[self.kernel].name,
            &self.config,
            self.target.to_string(),
            self.kind,
        )
    }
}

impl Workspace {
    /// Every artifact of the project (sorted as in the lock) with its action key.
    pub fn plan(&self, toolchain: &Toolchain) -> Result<Vec<Planned>> {
        let project = &self.project;
        let mut planned = Vec::new();
        for (index, kernel) in project.kernels.iter().enumerate() {
            for target in &kernel.targets {
                if !toolchain.supports(target) {
                    return Err(Error::usage(
                        format!(
                            "target {target} of kernel `{}` is not supported by nvcc {}",
                            kernel.name, toolchain.release
                        ),
                        Some(format!(
                            "remove it from `targets` ({} or kart.toml); this nvcc supports {}",
                            kernel.manifest.display(),
                            toolchain.gpu_codes.join(" ")
                        )),
                    ));
                }
            }
            let files = Arc::new(kernel_input_files(&project.root, kernel)?);
            let mut configs: Vec<&Config> = kernel.configs()?.iter().collect();
            configs.sort();
            for config in configs {
                for &target in &kernel.targets {
                    let kinds: &[ArtifactKind] = if kernel.ptx {
                        &[ArtifactKind::Cubin, ArtifactKind::Ptx]
                    } else {
                        &[ArtifactKind::Cubin]
                    };
                    for &kind in kinds {
                        let preimage = action_preimage(
                            &project.root,
                            toolchain,
                            kernel,
                            config,
                            target,
                            kind,
                            &files,
                        )?;
                        let key = action_key(&preimage);
                        let derived = kernel.derived_or_error(config)?;
                        planned.push(Planned {
                            derived,
                            kernel: index,
                            config: config.clone(),
                            target,
                            kind,
                            files: Arc::clone(&files),
                            key,
                        });
                    }
                }
            }
        }
        planned.sort_by(|a, b| a.sort_key(project).cmp(&b.sort_key(project)));
        Ok(planned)
    }

    /// The planned artifacts the selection names; an error if it names something that
    /// does not exist or matches nothing.
    pub fn select<'a>(
        &self,
        planned: &'a [Planned],
        selection: &Selection,
    ) -> Result<Vec<&'a Planned>> {
        let project = &self.project;
        for name in &selection.kernels {
            project.kernel(name)?;
        }
        let in_kernels =
            |k: &Kernel| selection.kernels.is_empty() || selection.kernels.contains(&k.name);
        for name in selection.params.keys() {
            if !project
                .kernels
                .iter()
                .filter(|k| in_kernels(k))
                .any(|k| k.params.contains_key(name))
            {
                let params: std::collections::BTreeSet<&str> = project
                    .kernels
                    .iter()
                    .filter(|k| in_kernels(k))
                    .flat_map(|k| k.params.keys().map(String::as_str))
                    .collect();
                let listed = params.iter().copied().collect::<Vec<_>>().join(", ");
                return Err(Error::usage(
                    format!("no selected kernel has a param `{name}`"),
                    Some(
                        match crate::suggest::did_you_mean(name, params.iter().copied()) {
                            Some(guess) => format!("{guess} (params: {listed})"),
                            None if params.is_empty() => {
                                "the selected kernels have no params".into()
                            }
                            None => format!("params: {listed}"),
                        },
                    ),
                ));
            }
        }
        for target in &selection.targets {
            if !project
                .kernels
                .iter()
                .filter(|k| in_kernels(k))
                .any(|k| k.targets.contains(target))
            {
                return Err(Error::usage(
                    format!("no selected kernel is built for {target}"),
                    Some(format!(
                        "add \"{target}\" to `targets` in kart.toml or the kernel's kernel.toml, then run `kart build --target {target}`"
                    )),
                ));
            }
        }
        let chosen: Vec<&Planned> = planned
            .iter()
            .filter(|p| {
                let kernel = &project.kernels[p.kernel];
                in_kernels(kernel)
                    && (selection.targets.is_empty() || selection.targets.contains(&p.target))
                    && selection
                        .params
                        .iter()
                        .all(|(n, v)| !kernel.params.contains_key(n) || p.config.get(n) == Some(v))
            })
            .collect();
        if chosen.is_empty() {
            return Err(self.nothing_selected(selection, &in_kernels));
        }
        Ok(chosen)
    }

    /// The error for a selection that matches no artifact: per selected kernel, which
    /// value is not in its grid or which step of the grid removed the combinations.
    fn nothing_selected(
        &self,
        selection: &Selection,
        in_kernels: &dyn Fn(&Kernel) -> bool,
    ) -> Error {
        let project = &self.project;
        if project.kernels.is_empty() {
            return Error::usage(
                format!(
                    "the project has no kernels yet (none under `{}/`)",
                    project.kernels_dir.display()
                ),
                Some("`kart init` writes a smoke kernel to start from; a kernel is a folder with a kernel.toml".into()),
            );
        }
        let reasons: Vec<String> = project
            .kernels
            .iter()
            .filter(|k| in_kernels(k))
            .filter_map(|k| {
                k.grid()
                    .why_none(&selection.params)
                    .map(|why| format!("{}: {why}", k.name))
            })
            .collect();
        Error::usage(
            "the selection matches no artifact",
            Some(if reasons.is_empty() {
                "no selected kernel is built for the targets given".to_string()
            } else {
                reasons.join("\n  ")
            }),
        )
    }

    /// The stored action entry of `key` whose blob the store has, or why there is none
    /// (an unreadable entry is quarantined, and the reason says so).
    pub fn recorded_entry(&self, key: &str) -> std::result::Result<ActionEntry, String> {
        match self.store.get_entry(key) {
            Ok(Some(entry)) if self.store.has_blob(&entry.digest) => Ok(entry),
            Ok(Some(entry)) => Err(format!(
                "the store has its action entry but not its blob {}",
                entry.digest
            )),
            Ok(None) => Err("the store has no action entry for its key".into()),
            Err(e) => Err(format!("{e} (quarantined)")),
        }
    }

    /// The action entry of a key whose blob is in the store, if both are. An unreadable
    /// entry is reported and counts as absent.
    pub fn stored_entry(&self, key: &str, reporter: &dyn BuildReporter) -> Option<ActionEntry> {
        self.stored_entry_with_state(key, reporter)
            .map(|(entry, _)| entry)
    }

    /// [`Workspace::stored_entry`] with the state of the entry's file.
    pub fn stored_entry_with_state(
        &self,
        key: &str,
        reporter: &dyn BuildReporter,
    ) -> Option<(ActionEntry, crate::store::EntryState)> {
        match self.store.get_entry_with_state(key) {
            Ok(Some((entry, state))) if self.store.has_blob(&entry.digest) => Some((entry, state)),
            Ok(_) => None,
            Err(e) => {
                reporter.note(&format!("warning: {e} (quarantined; it will be rebuilt)"));
                None
            }
        }
    }
}
