//! The hot path: resolve a (kernel, config) for a device from the lock, verify the
//! blob's sha256, load it through the CUDA driver, resolve and load every entry, and
//! cache the result per context. No nvcc, no NVRTC, no JIT (unless PTX is allowed
//! explicitly).
//!
//! The driver is loaded dynamically (cudarc): a program using this module starts on a
//! machine without CUDA and gets [`Error::Environment`] ("no CUDA driver") when it asks
//! for a GPU.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::error::{Error, Result};
use crate::key::ArtifactKind;
use crate::lockfile::{LOCK_FILE, LockedArtifact, Lockfile, lock_path};
use crate::manifest::{Config, Project};
use crate::resolve::{
    Capability, JitPolicy, driver_branch, format_cuda_version, required_driver_version, resolve,
};
use crate::store::{LockMode, Store};
use crate::target::TargetArch;

/// The lock and the store, opened without touching the GPU.
pub struct Runtime {
    lock: Lockfile,
    store: Store,
    /// (kernel, config) → indices into `lock.artifacts`.
    index: HashMap<String, HashMap<Config, Vec<usize>>>,
}

impl Runtime {
    /// Opens the project found from `start` (its `kart.lock` and store).
    pub fn open(start: &Path) -> Result<Runtime> {
        let project = Project::discover(start)?;
        let lock =
            Lockfile::read(&lock_path(&project.root), Path::new(LOCK_FILE))?.ok_or_else(|| {
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
        Ok(Runtime::from_parts(lock, store))
    }

    /// A runtime over an already opened lock and store.
    pub fn from_parts(lock: Lockfile, store: Store) -> Runtime {
        let mut index: HashMap<String, HashMap<Config, Vec<usize>>> = HashMap::new();
        for (i, a) in lock.artifacts.iter().enumerate() {
            index
                .entry(a.kernel.clone())
                .or_default()
                .entry(a.config.clone())
                .or_default()
                .push(i);
        }
        Runtime { lock, store, index }
    }

    /// The lock.
    pub fn lock(&self) -> &Lockfile {
        &self.lock
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
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
        let Some(configs) = self.index.get(kernel) else {
            let mut names: Vec<&str> = self.index.keys().map(String::as_str).collect();
            names.sort();
            return Err(Error::NotLoadable {
                message: format!("kart.lock has no kernel `{kernel}`"),
                hint: Some(format!("kernels in the lock: {}", names.join(", "))),
            });
        };
        let Some(indices) = configs.get(config) else {
            let mut known: Vec<String> = configs.keys().map(|c| c.to_string()).collect();
            known.sort();
            return Err(Error::NotLoadable {
                message: format!("kart.lock has no config {config} of `{kernel}`"),
                hint: Some(format!("configs in the lock: {}", known.join("  "))),
            });
        };
        let available: Vec<(TargetArch, ArtifactKind)> = indices
            .iter()
            .filter_map(|&i| {
                let a = &self.lock.artifacts[i];
                a.target.parse().ok().map(|t| (t, a.kind))
            })
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
        let i = indices
            .iter()
            .copied()
            .find(|&i| {
                let a = &self.lock.artifacts[i];
                a.kind == kind && a.target == target.to_string()
            })
            .unwrap_or(indices[0]);
        Ok(&self.lock.artifacts[i])
    }
}

/// Fails with a typed error, never a panic, when no CUDA driver library can be loaded.
pub fn probe_driver() -> Result<()> {
    // SAFETY: only tries to dlopen the driver library.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::environment(
            "no CUDA driver: libcuda.so could not be loaded",
            "run on a machine with an NVIDIA GPU and its driver (kart build needs neither)",
        ))
    }
}

fn driver_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Driver {
        call,
        message: e.to_string(),
    }
}

/// The version of CUDA the installed driver supports (13000 for 13.0).
pub fn driver_version() -> Result<i32> {
    probe_driver()?;
    let mut v = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(driver_err("cuDriverGetVersion"))?;
    Ok(v)
}

/// How many CUDA devices there are (0 without a driver).
pub fn device_count() -> usize {
    if probe_driver().is_err() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// Where the time of one artifact load went.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadTimings {
    /// Read the blob file, decompress it and check its sha256.
    pub read: Duration,
    /// `cuModuleLoadData`.
    pub load: Duration,
    /// Look up and load every entry.
    pub resolve: Duration,
}

/// A loaded, verified artifact with every entry resolved.
pub struct LoadedArtifact {
    /// The lock entry it came from.
    pub artifact: LockedArtifact,
    /// The driver module.
    pub module: Arc<CudaModule>,
    functions: Vec<(String, CudaFunction)>,
    /// Where the load's time went.
    pub timings: LoadTimings,
}

impl LoadedArtifact {
    /// The function handle of an entry.
    pub fn function(&self, entry: &str) -> Result<&CudaFunction> {
        self.functions
            .iter()
            .find(|(n, _)| n == entry)
            .map(|(_, f)| f)
            .ok_or_else(|| Error::NotLoadable {
                message: format!(
                    "{} has no entry `{entry}` (entries: {})",
                    self.artifact.describe(),
                    self.functions
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                hint: None,
            })
    }

    /// Allows `bytes` of dynamic shared memory for `entry` (needed above 48 KiB).
    pub fn allow_dynamic_shared(&self, entry: &str, bytes: u32) -> Result<()> {
        let f = self.function(entry)?;
        f.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(driver_err("cuFuncSetAttribute"))
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
        Ok(Gpu {
            ctx,
            capability: Capability {
                major: major as u32,
                minor: minor as u32,
            },
            name,
            driver_version,
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
        let bytes = rt.store.read_blob(&artifact.digest, Some(artifact.size))?;
        let t1 = Instant::now();
        self.load_verified(artifact.clone(), bytes, t1 - t0)
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
                .load_function(&entry.name)
                .map_err(driver_err("cuModuleGetFunction"))?;
            force_load(&f, self.driver_version)?;
            functions.push((entry.name.clone(), f));
        }
        let t2 = Instant::now();
        Ok(LoadedArtifact {
            artifact,
            module,
            functions,
            timings: LoadTimings {
                read: read_and_verify,
                load: t1 - t0,
                resolve: t2 - t1,
            },
        })
    }
}

/// With lazy loading (`CUDA_MODULE_LOADING=LAZY`, the default) a function is only
/// really loaded at its first launch; `cuFuncLoad` (CUDA 12.4+) loads it now, so a
/// broken image fails here and not inside a timed region. Older drivers have no
/// `cuFuncLoad`; reading an attribute forces the load there.
fn force_load(f: &CudaFunction, driver_version: i32) -> Result<()> {
    if driver_version >= 12040 {
        // SAFETY: a valid function handle of a live module.
        unsafe { sys::cuFuncLoad(f.cu_function()) }
            .result()
            .map_err(driver_err("cuFuncLoad"))
    } else {
        f.num_regs()
            .map(|_| ())
            .map_err(driver_err("cuFuncGetAttribute"))
    }
}
