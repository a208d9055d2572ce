//! The hot path: resolve a (kernel, config) for a device from the lock, verify the
//! blob's sha256, load it through the CUDA driver, resolve and load every entry, and
//! cache the result per context. No nvcc, no NVRTC, no JIT (unless PTX is allowed
//! explicitly).
//!
//! The driver is loaded dynamically (cudarc): a program using this module starts on a
//! machine without CUDA and gets [`Error::Environment`] ("no CUDA driver") when it asks
//! for a GPU.
//!
//! The three types of the hot path: [`Runtime`] (the lock's index) and [`Gpu`] (a
//! context and its cache) here, [`LoadedArtifact`] (a verified module and its
//! launches) in `loaded`; the driver's calls in `driver`, launch arguments in [`args`],
//! tensor maps in [`tma`], what a machine can load in [`doctor`].

pub mod args;
pub mod doctor;
mod driver;
mod loaded;
pub mod tma;

pub use args::{KernelArg, LaunchDims, check_args};
pub use driver::{device_count, driver_version, probe_driver};
use driver::{driver_err, force_load};
pub use loaded::{LoadTimings, LoadedArtifact};

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::resolve::{
    Capability, JitPolicy, driver_branch, format_cuda_version, required_driver_version, resolve,
};
use crate::store::bundle::Bundle;
use crate::store::lockfile::{LOCK_FILE, LockedArtifact, Lockfile, lock_path};
use crate::store::lockindex::{Bisected, LockIndex};
use crate::store::{LockMode, Store};
use crate::target::TargetArch;

/// The variable that makes [`Runtime::open`] read a bundle (`kart bundle`) instead of
/// the project's `kart.lock` and store: a deployment ships one file and sets it.
pub const BUNDLE_ENV: &str = "KART_BUNDLE";

/// Where a runtime's blobs come from.
#[derive(Debug)]
pub enum Blobs {
    /// A project's store (`artifacts/`).
    Store(Store),
    /// A bundle file.
    Bundle(Box<Bundle>),
}

impl Blobs {
    /// Blob `digest`, checked against it.
    pub fn read_blob(&self, digest: &str, size: Option<u64>) -> Result<Vec<u8>> {
        match self {
            Blobs::Store(store) => store.read_blob(digest, size),
            Blobs::Bundle(bundle) => bundle.read_blob(digest, size),
        }
    }
}

/// How many of a kernel's configs an error about a missing config names.
const SHOWN_CONFIGS: usize = 12;

/// The lock and the blobs (a store or a bundle), opened without touching the GPU.
///
/// Opening indexes the lock without parsing its records (a large one by reading its
/// ends only, see [`LockIndex`]); selecting a (kernel, config) reads and parses the
/// few records of that config. A malformed record is reported when a lookup touches it, with the file and
/// line; one that no lookup touches is not (`kart build` and `kart verify` read the
/// whole lock). `Send + Sync`.
pub struct Runtime {
    lock: Arc<LockIndex>,
    blobs: Blobs,
}

impl Runtime {
    /// Opens the project found from `start` (its `kart.lock` and store), or, when
    /// [`BUNDLE_ENV`] names a file, that bundle instead.
    pub fn open(start: &Path) -> Result<Runtime> {
        if let Some(bundle) = std::env::var_os(BUNDLE_ENV).filter(|v| !v.is_empty()) {
            return Runtime::open_bundle(Path::new(&bundle));
        }
        let project = crate::locate::project(start)?;
        let lock =
            LockIndex::read(&lock_path(&project.root), Path::new(LOCK_FILE))?.ok_or_else(|| {
                Error::usage(
                    format!("no kart.lock in `{}`", project.root.display()),
                    Some("run `kart build` (or `kart fetch`) first".into()),
                )
            })?;
        let store = Store::open(
            &project.store_dir,
            LockMode::Shared,
            Duration::from_secs(60),
        )?;
        Ok(Runtime::from_index(lock, Blobs::Store(store)))
    }

    /// A runtime over a bundle: its lock, its blobs, nothing else.
    pub fn open_bundle(path: &Path) -> Result<Runtime> {
        let bundle = Bundle::open(path)?;
        Ok(Runtime {
            lock: bundle.lock_index().clone(),
            blobs: Blobs::Bundle(Box::new(bundle)),
        })
    }

    /// A runtime over an already opened lock and store.
    pub fn from_parts(lock: Lockfile, store: Store) -> Runtime {
        Runtime::with_blobs(lock, Blobs::Store(store))
    }

    /// A runtime over a lock and where its blobs are.
    pub fn with_blobs(lock: Lockfile, blobs: Blobs) -> Runtime {
        Runtime::from_index(LockIndex::parsed(lock), blobs)
    }

    /// A runtime over an indexed lock (read lazily) and where its blobs are.
    pub fn from_index(lock: LockIndex, blobs: Blobs) -> Runtime {
        Runtime {
            lock: Arc::new(lock),
            blobs,
        }
    }

    /// The whole lock, every record parsed and validated on the first call (a lookup
    /// needs only [`Runtime::records`] or [`Runtime::select`]).
    pub fn lock(&self) -> Result<&Lockfile> {
        self.lock.whole()
    }

    /// The lock's index, parsed as far as lookups have needed.
    pub fn lock_index(&self) -> &LockIndex {
        &self.lock
    }

    /// The kernels of the lock, sorted.
    pub fn kernels(&self) -> Result<Vec<&str>> {
        self.lock.kernels()
    }

    /// Every artifact of `kernel` (empty when the lock has none), parsed on first use.
    pub fn records(&self, kernel: &str) -> Result<&[LockedArtifact]> {
        self.lock.records(kernel)
    }

    /// The `[launch]` of `kernel`, if the lock records one.
    pub fn launch(&self, kernel: &str) -> Option<&crate::launch::LaunchText> {
        self.lock.launch(kernel)
    }

    /// Where the blobs come from.
    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    /// The store, unless the runtime reads a bundle.
    pub fn store(&self) -> Option<&Store> {
        match &self.blobs {
            Blobs::Store(store) => Some(store),
            Blobs::Bundle(_) => None,
        }
    }

    /// The bundle, if the runtime reads one.
    pub fn bundle(&self) -> Option<&Bundle> {
        match &self.blobs {
            Blobs::Bundle(bundle) => Some(bundle),
            Blobs::Store(_) => None,
        }
    }

    /// Why (kernel, config) has no record: no such kernel (naming those there are), or
    /// no such config (naming configs the lock has: for a large lock, the nearest in its
    /// order, without reading the kernel's records).
    fn not_in_lock(&self, kernel: &str, config: &Config) -> Result<Error> {
        let names = self.lock.kernels()?;
        if !names.contains(&kernel) {
            return Ok(Error::NotLoadable {
                message: format!("kart.lock has no kernel `{kernel}`"),
                hint: Some(format!("kernels in the lock: {}", names.join(", "))),
            });
        }
        let nearest = match self.lock.bisected(kernel, config) {
            Some(Bisected::Missing { before, after }) => Some([before, after]),
            _ => None,
        };
        let mut known: Vec<String> = match nearest {
            Some(around) => around
                .into_iter()
                .flatten()
                .filter(|a| a.kernel == kernel)
                .map(|a| a.config.to_string())
                .collect(),
            _ => (self.lock.records(kernel)?.iter())
                .map(|a| a.config.to_string())
                .collect(),
        };
        // In the lock's order (configs compare value by value), each config once.
        known.dedup();
        let hint = if nearest.is_some() {
            format!(
                "the nearest configs in the lock: {}; `kart ls {kernel}` lists them all",
                known.join("  ")
            )
        } else if known.len() > SHOWN_CONFIGS {
            format!(
                "configs in the lock: {}  … and {} more (`kart ls {kernel}` lists them all)",
                known[..SHOWN_CONFIGS].join("  "),
                known.len() - SHOWN_CONFIGS
            )
        } else {
            format!("configs in the lock: {}", known.join("  "))
        };
        Ok(Error::NotLoadable {
            message: format!("kart.lock has no config {config} of `{kernel}`"),
            hint: Some(hint),
        })
    }

    /// The artifact of (kernel, config) a device of `capability` should load, or an
    /// error naming what exists and the build that would add one.
    pub fn select(
        &self,
        kernel: &str,
        config: &Config,
        capability: Capability,
        policy: JitPolicy,
    ) -> Result<&LockedArtifact> {
        let group = self.lock.of_config(kernel, config)?;
        if group.is_empty() {
            return Err(self.not_in_lock(kernel, config)?);
        }
        let available: Vec<(TargetArch, ArtifactKind)> = group
            .iter()
            .filter_map(|a| a.target.parse().ok().map(|t| (t, a.kind)))
            .collect();
        let Some((target, kind)) = resolve(capability, &available, policy) else {
            let targets: Vec<String> = available
                .iter()
                .map(|(t, k)| match k {
                    ArtifactKind::Cubin => t.to_string(),
                    ArtifactKind::Ptx => format!("{t} (ptx)"),
                })
                .collect();
            let device_target = capability.target();
            return Err(Error::NotLoadable {
                message: format!(
                    "no artifact of {kernel}[{config}] runs on this device (compute capability {capability}, {device_target}); built: {}",
                    targets.join(", ")
                ),
                hint: Some(format!(
                    "add \"{device_target}\" to `targets` (kart.toml or the kernel's kernel.toml) and run `kart build {kernel} --target {device_target}`"
                )),
            });
        };
        let target = target.to_string();
        Ok(group
            .iter()
            .copied()
            .find(|a| a.kind == kind && a.target == target)
            .unwrap_or(group[0]))
    }
}

type LoadedMap = HashMap<String, HashMap<Config, Arc<LoadedArtifact>>>;

/// One device's context with its cache of loaded artifacts. `Send + Sync`.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    /// Its compute capability.
    pub capability: Capability,
    /// Its name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The CUDA version its driver supports (13000).
    pub driver_version: i32,
    /// Its streaming multiprocessors (132 on an H100 or H200 SXM): `SMS` in `[launch]`.
    pub multiprocessors: u32,
    policy: JitPolicy,
    loaded: RwLock<LoadedMap>,
}

impl Gpu {
    /// Opens device `ordinal` (its primary context). Cubins only; see [`Gpu::with_policy`].
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let driver_version = driver_version()?;
        let count = device_count();
        if ordinal >= count {
            return Err(Error::environment(
                format!("no CUDA GPU {ordinal} (this machine has {count})"),
                "run on a machine with an NVIDIA GPU",
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver_err("cuCtxCreate"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver_err("cuDeviceGetAttribute"))?;
        let name = ctx.name().map_err(driver_err("cuDeviceGetName"))?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_err("cuDeviceGetAttribute"))? as u32;
        Ok(Gpu {
            ctx,
            capability: Capability {
                major: major as u32,
                minor: minor as u32,
            },
            name,
            driver_version,
            multiprocessors,
            policy: JitPolicy::Forbid,
            loaded: RwLock::new(HashMap::new()),
        })
    }

    /// Sets whether PTX may be JIT-compiled when no cubin fits.
    pub fn with_policy(mut self, policy: JitPolicy) -> Gpu {
        self.policy = policy;
        self
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The context's default stream.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.ctx.default_stream()
    }

    /// The loaded artifact of (kernel, config): after the first call a map lookup, no
    /// file read and no hashing.
    pub fn kernel(
        &self,
        rt: &Runtime,
        kernel: &str,
        config: &Config,
    ) -> Result<Arc<LoadedArtifact>> {
        if let Ok(map) = self.loaded.read()
            && let Some(hit) = map.get(kernel).and_then(|m| m.get(config))
        {
            return Ok(hit.clone());
        }
        let loaded = Arc::new(self.load(rt, kernel, config)?);
        let mut map = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        let slot = map
            .entry(kernel.to_string())
            .or_default()
            .entry(config.clone())
            .or_insert(loaded);
        Ok(slot.clone())
    }

    /// Loads every listed (kernel, config) now, so that nothing loads later inside a
    /// CUDA-graph capture or a timed region.
    pub fn preload(&self, rt: &Runtime, items: &[(&str, Config)]) -> Result<()> {
        for (kernel, config) in items {
            self.kernel(rt, kernel, config)?;
        }
        Ok(())
    }

    fn load(&self, rt: &Runtime, kernel: &str, config: &Config) -> Result<LoadedArtifact> {
        let artifact = rt.select(kernel, config, self.capability, self.policy)?;
        self.load_artifact(rt, artifact)
    }

    /// Loads one given artifact of the lock (not necessarily the one [`Gpu::kernel`]
    /// would pick), uncached: checks that this device can run it and the driver can
    /// take it, reads and verifies the blob, loads it and every entry.
    pub fn load_artifact(&self, rt: &Runtime, artifact: &LockedArtifact) -> Result<LoadedArtifact> {
        let target: TargetArch =
            artifact
                .target
                .parse()
                .map_err(|e: crate::target::BadTarget| Error::NotLoadable {
                    message: e.0,
                    hint: None,
                })?;
        let fits = match artifact.kind {
            ArtifactKind::Cubin => crate::resolve::cubin_fit(target, self.capability).is_some(),
            ArtifactKind::Ptx => {
                self.policy == JitPolicy::AllowPtx
                    && crate::resolve::ptx_fit(target, self.capability).is_some()
            }
        };
        if !fits {
            return Err(Error::NotLoadable {
                message: format!(
                    "{} cannot run on this device (compute capability {})",
                    artifact.describe(),
                    self.capability
                ),
                hint: None,
            });
        }
        self.check_driver_floor(artifact)?;
        let t0 = Instant::now();
        let bytes = rt.blobs.read_blob(&artifact.digest, Some(artifact.size))?;
        let t1 = Instant::now();
        let mut loaded = self.load_verified(artifact.clone(), bytes, t1 - t0)?;
        loaded.launch = match rt.launch(&artifact.kernel) {
            Some(text) => Some(crate::launch::LaunchSpec::from_text(text).map_err(|e| {
                Error::NotLoadable {
                    message: format!("[launch] of `{}` in kart.lock: {e}", artifact.kernel),
                    hint: Some("regenerate kart.lock with `kart build`".into()),
                }
            })?),
            None => None,
        };
        Ok(loaded)
    }

    /// Refuses an artifact built by an nvcc newer than this driver supports.
    pub fn check_driver_floor(&self, artifact: &LockedArtifact) -> Result<()> {
        let Some(required) = required_driver_version(&artifact.nvcc) else {
            return Ok(());
        };
        if self.driver_version >= required {
            return Ok(());
        }
        Err(Error::NotLoadable {
            message: format!(
                "{} was built by nvcc {}, which needs a driver for CUDA {} or newer (branch r{}+); this driver supports CUDA {}",
                artifact.describe(),
                artifact.nvcc,
                format_cuda_version(required),
                driver_branch(required / 1000),
                format_cuda_version(self.driver_version)
            ),
            hint: Some(
                "update the NVIDIA driver, or build with an nvcc this driver supports".into(),
            ),
        })
    }

    /// Loads bytes already verified against `artifact.digest`, resolves and loads every
    /// entry.
    pub fn load_verified(
        &self,
        artifact: LockedArtifact,
        bytes: Vec<u8>,
        read_and_verify: Duration,
    ) -> Result<LoadedArtifact> {
        let t0 = Instant::now();
        let image = match artifact.kind {
            ArtifactKind::Cubin => cudarc::nvrtc::Ptx::from_binary(bytes),
            ArtifactKind::Ptx => {
                cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        let module = self
            .ctx
            .load_module(image)
            .map_err(driver_err("cuModuleLoadData"))?;
        let t1 = Instant::now();
        let mut functions = Vec::new();
        for entry in &artifact.entries {
            let f = module
                .load_function(entry.symbol())
                .map_err(driver_err("cuModuleGetFunction"))?;
            force_load(&f, self.driver_version)?;
            functions.push((entry.name.clone(), f));
        }
        let t2 = Instant::now();
        Ok(LoadedArtifact {
            artifact,
            module,
            functions,
            launch: None,
            multiprocessors: self.multiprocessors,
            gpu_name: Arc::from(self.name.as_str()),
            capability: self.capability,
            traced: Default::default(),
            made_maps: Default::default(),
            timings: LoadTimings {
                read: read_and_verify,
                load: t1 - t0,
                resolve: t2 - t1,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cubin::EntryInfo;
    use crate::signature::ParamKind;

    #[test]
    fn launch_arguments_are_checked_against_the_signature_or_the_sizes() {
        let mut entry = EntryInfo {
            name: "axpb".into(),
            params: vec![8, 8, 4, 4, 4],
            ..EntryInfo::default()
        };
        let good = [
            KernelArg::Ptr(1 << 20),
            KernelArg::Ptr(2 << 20),
            KernelArg::F32(1.5),
            KernelArg::F32(-0.25),
            KernelArg::I32(7),
        ];
        assert!(check_args("smoke", &entry, &good).is_ok());
        // Without a signature only sizes are known: an i32 where an f32 goes passes.
        let mut swapped = good.clone();
        swapped[2] = KernelArg::I32(1);
        assert!(check_args("smoke", &entry, &swapped).is_ok());
        let err = check_args("smoke", &entry, &good[..4]).unwrap_err();
        assert!(err.to_string().contains("sizes [8, 8, 4, 4, 4]"), "{err}");
        // The smoke kernel's: (const float* x, float* y, float a, float b, int n).
        entry.signature = Some(vec![
            ParamKind::Ptr,
            ParamKind::Ptr,
            ParamKind::F32,
            ParamKind::F32,
            ParamKind::I32,
        ]);
        let err = check_args("smoke", &entry, &swapped).unwrap_err();
        assert!(
            err.to_string().contains("[ptr, ptr, f32, f32, i32]")
                && err.to_string().contains("[ptr, ptr, i32, f32, i32]"),
            "{err}"
        );
        assert_eq!(KernelArg::I8(-1).bits(), 0xff);
        assert_eq!(KernelArg::F32(1.0).bits(), 0x3f80_0000);
    }

    /// What `select` says of a config the lock lacks, read whole and read by bisection.
    fn missing_config_message(bisect_from: u64) -> (String, String) {
        use crate::model::ParamValue;
        let dir = tempfile::tempdir().unwrap();
        // 40 configs of one kernel, more than a message lists.
        let artifacts = (0..40)
            .map(|i| {
                let config = Config::from([("BLOCK".to_string(), ParamValue::Int(i * 2))]);
                crate::store::testlock::artifact("tiny", config, "sm_90", ArtifactKind::Cubin)
            })
            .collect();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, Lockfile::new(artifacts).to_text()).unwrap();
        let lock = LockIndex::read_bisecting_from(&path, Path::new(LOCK_FILE), bisect_from)
            .unwrap()
            .unwrap();
        let store = Store::open(
            &dir.path().join("store"),
            LockMode::Shared,
            Duration::from_secs(5),
        )
        .unwrap();
        let rt = Runtime::from_index(lock, Blobs::Store(store));
        let capability = Capability { major: 9, minor: 0 };
        let asked = Config::from([("BLOCK".to_string(), ParamValue::Int(21))]);
        let err = rt
            .select("tiny", &asked, capability, JitPolicy::Forbid)
            .unwrap_err();
        let Error::NotLoadable { message, hint } = err else {
            panic!("{err}")
        };
        let none = rt
            .select("nope", &asked, capability, JitPolicy::Forbid)
            .unwrap_err();
        assert!(none.to_string().contains("no kernel `nope`"), "{none}");
        assert!(
            format!("{none:?}").contains("kernels in the lock: tiny"),
            "{none:?}"
        );
        (message, hint.unwrap())
    }

    #[test]
    fn a_missing_config_names_a_few_configs_the_lock_has() {
        // Read whole: the first configs in order, and how many more.
        let (message, hint) = missing_config_message(u64::MAX);
        assert_eq!(message, "kart.lock has no config BLOCK=21 of `tiny`");
        assert!(
            hint.starts_with("configs in the lock: BLOCK=0  BLOCK=2  BLOCK=4  "),
            "{hint}"
        );
        assert!(
            hint.ends_with("… and 28 more (`kart ls tiny` lists them all)"),
            "{hint}"
        );
        // By bisection: the two around where it would be, without reading the rest.
        let (message, hint) = missing_config_message(0);
        assert_eq!(message, "kart.lock has no config BLOCK=21 of `tiny`");
        assert_eq!(
            hint,
            "the nearest configs in the lock: BLOCK=20  BLOCK=22; `kart ls tiny` lists them all"
        );
    }
}
