//! The hot path: resolve a (kernel, config) for a device from the lock, verify the
//! blob's sha256, load it through the CUDA driver, resolve and load every entry, and
//! cache the result per context. No nvcc, no NVRTC, no JIT (unless PTX is allowed
//! explicitly).
//!
//! The driver is loaded dynamically (cudarc): a program using this module starts on a
//! machine without CUDA and gets [`Error::Environment`] ("no CUDA driver") when it asks
//! for a GPU.
//!
//! Over 600 lines on purpose: the three types of the hot path — [`Runtime`] (the lock's
//! index), [`Gpu`] (a context and its cache) and [`LoadedArtifact`] (a verified module
//! and its launches) — take each other as arguments and share the driver's private
//! helpers; what stands alone is apart (launch arguments in [`args`], tensor maps in
//! [`tma`], what a machine can load in [`doctor`]).

pub mod args;
pub mod doctor;
pub mod tma;

pub use args::{KernelArg, LaunchDims, check_args};

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::error::{Error, Result};
use crate::expr::{Env, Layered, Value};
use crate::model::ArtifactKind;
use crate::model::Config;
use crate::resolve::{
    Capability, JitPolicy, driver_branch, format_cuda_version, required_driver_version, resolve,
};
use crate::signature::ParamKind;
use crate::store::bundle::Bundle;
use crate::store::lockfile::{LOCK_FILE, LockedArtifact, Lockfile, lock_path};
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

/// The lock and the blobs (a store or a bundle), opened without touching the GPU.
pub struct Runtime {
    lock: Lockfile,
    blobs: Blobs,
    /// (kernel, config) → indices into `lock.artifacts`.
    index: HashMap<String, HashMap<Config, Vec<usize>>>,
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

    /// A runtime over a bundle: its lock, its blobs, nothing else.
    pub fn open_bundle(path: &Path) -> Result<Runtime> {
        let bundle = Bundle::open(path)?;
        let lock = bundle.lock().clone();
        Ok(Runtime::with_blobs(lock, Blobs::Bundle(Box::new(bundle))))
    }

    /// A runtime over an already opened lock and store.
    pub fn from_parts(lock: Lockfile, store: Store) -> Runtime {
        Runtime::with_blobs(lock, Blobs::Store(store))
    }

    /// A runtime over a lock and where its blobs are.
    pub fn with_blobs(lock: Lockfile, blobs: Blobs) -> Runtime {
        let mut index: HashMap<String, HashMap<Config, Vec<usize>>> = HashMap::new();
        for (i, a) in lock.artifacts.iter().enumerate() {
            index
                .entry(a.kernel.clone())
                .or_default()
                .entry(a.config.clone())
                .or_default()
                .push(i);
        }
        Runtime { lock, blobs, index }
    }

    /// The lock.
    pub fn lock(&self) -> &Lockfile {
        &self.lock
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
    /// The kernel's `[launch]` geometry, when the lock records one.
    pub launch: Option<crate::launch::LaunchSpec>,
    /// The multiprocessors of the GPU it was loaded on (`SMS` in `[launch]`).
    pub multiprocessors: u32,
    /// The name of the GPU it was loaded on.
    pub gpu_name: Arc<str>,
    /// Its compute capability.
    pub capability: Capability,
    /// The problems it was traced with ([`crate::trace`]).
    traced: crate::trace::Seen,
    /// Tensor maps `[launch.args]` made, by (parameter, pointer, shape, tile): a
    /// repeated launch on the same tensors encodes nothing.
    made_maps: std::sync::Mutex<HashMap<MapKey, tma::TensorMap>>,
}

type MapKey = (usize, u64, Vec<u64>, Vec<u32>);

/// Names `[launch]` sees beside the config and the problem (which wins): `SMS`.
struct LaunchBuiltins {
    multiprocessors: u32,
}

impl Env for LaunchBuiltins {
    fn get(&self, name: &str) -> Option<Value<'_>> {
        (name == "SMS").then_some(Value::Int(i64::from(self.multiprocessors)))
    }
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
                    self.artifact
                        .entries
                        .iter()
                        .map(|e| match &e.instance {
                            Some(i) => format!("{} ({i})", e.name),
                            None => e.name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                hint: None,
            })
    }

    /// The grid, block and dynamic shared memory the kernel's `[launch]` computes for
    /// this config and `problem` (named integers: `B`, `H`, `S`, …). `SMS` is the GPU's
    /// multiprocessor count unless the problem names it (persistent kernels size their
    /// grid by it).
    pub fn dims(&self, problem: &crate::model::Problem) -> Result<LaunchDims> {
        let Some(spec) = &self.launch else {
            return Err(Error::usage(
                format!(
                    "kernel `{}` declares no [launch] in kernel.toml",
                    self.artifact.kernel
                ),
                Some("add a [launch] table (grid, block, shared_mem), rebuild kart.lock, or pass LaunchDims to `launch`".into()),
            ));
        };
        let g = spec
            .geometry(
                &self.artifact.config,
                &self.artifact.derived,
                &Layered(problem, &LaunchBuiltins { multiprocessors: self.multiprocessors }),
            )
            .map_err(|e| {
                let keys: Vec<&str> = problem.keys().map(String::as_str).collect();
                Error::usage(
                    format!("{}: {e}", self.artifact.describe()),
                    Some(format!(
                        "the problem has {}; [launch] may use the config's params, derived params and the problem's keys",
                        if keys.is_empty() { "no keys".to_string() } else { keys.join(", ") }
                    )),
                )
            })?;
        Ok(LaunchDims {
            grid: g.grid,
            block: g.block,
            shared_bytes: g.shared_bytes,
        })
    }

    /// Launches `entry` with the geometry `[launch]` computes for `problem`: the caller
    /// passes arguments and the problem, no launch arithmetic.
    pub fn launch_problem(
        &self,
        entry: &str,
        problem: &crate::model::Problem,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        let dims = self.dims(problem)?;
        match self.launch.as_ref().and_then(|l| l.args.get(entry)) {
            None => self.launch_inner(entry, dims, None, stream, args, Some(problem)),
            Some(spec) => {
                let made = self.call_args(entry, spec, problem, args)?;
                self.launch_inner(entry, dims, None, stream, &made, Some(problem))
            }
        }
    }

    /// The kernel's parameters made from the caller's `args` by the entry's
    /// `[launch.args]`: tensor maps encoded over the caller's pointers, values computed
    /// from the config and the problem, the rest passed through.
    pub fn call_args(
        &self,
        entry: &str,
        spec: &[crate::call::ArgSpec],
        problem: &crate::model::Problem,
        args: &[KernelArg],
    ) -> Result<Vec<KernelArg>> {
        use crate::call::{MadeArg, make_args};
        let builtins = LaunchBuiltins {
            multiprocessors: self.multiprocessors,
        };
        let env = Layered(
            &self.artifact.config,
            &Layered(&self.artifact.derived, &Layered(problem, &builtins)),
        );
        let what = || format!("{}.{entry}", self.artifact.describe());
        let made = make_args(entry, spec, args.len(), &env).map_err(|e| {
            Error::usage(
                format!("{}: {e}", what()),
                Some("pass the entry's call arguments (its signature without what [launch.args] makes) and a problem with every key [launch.args] names".into()),
            )
        })?;
        let signature = self
            .artifact
            .entries
            .iter()
            .find(|e| e.name == entry)
            .and_then(|e| e.signature.clone())
            .unwrap_or_default();
        made.into_iter()
            .enumerate()
            .map(|(i, m)| match m {
                MadeArg::Caller(c) => Ok(args[c].clone()),
                MadeArg::Value(v) => {
                    let kind = signature.get(i).copied().unwrap_or(ParamKind::I64);
                    KernelArg::integer(kind, v).ok_or_else(|| {
                        Error::usage(
                            format!("{}: parameter {i} ({kind}) computed by [launch.args] is {v}, which does not fit", what()),
                            None,
                        )
                    })
                }
                MadeArg::TensorMap {
                    caller,
                    dtype,
                    shape,
                    strides,
                    tile,
                    swizzle,
                    ..
                } => {
                    let KernelArg::Ptr(ptr) = args[caller] else {
                        return Err(Error::usage(
                            format!(
                                "{}: call argument {caller} is {}, but [launch.args] makes a tensor map of parameter {i} over it: pass a device pointer",
                                what(),
                                args[caller].kind()
                            ),
                            None,
                        ));
                    };
                    let key: MapKey = (i, ptr, shape, tile);
                    if let Ok(made) = self.made_maps.lock()
                        && let Some(map) = made.get(&key)
                    {
                        return Ok(KernelArg::TensorMap(*map));
                    }
                    let dtype = tma::TmaType::from_name(&dtype).ok_or_else(|| {
                        Error::usage(format!("{}: unknown tensor map type `{dtype}`", what()), None)
                    })?;
                    let swizzle = tma::Swizzle::from_bytes(swizzle).unwrap_or(tma::Swizzle::None);
                    let map = tma::TensorMap::tiled(dtype, ptr, &key.2, &strides, &key.3, swizzle)?;
                    if let Ok(mut made) = self.made_maps.lock() {
                        if made.len() >= 1024 {
                            made.clear();
                        }
                        made.insert(key, map);
                    }
                    Ok(KernelArg::TensorMap(map))
                }
            })
            .collect()
    }

    /// Launches `entry` on `stream` with checked arguments: their number and kinds must
    /// match the entry's declared `[signature]`, or, without one, their sizes must
    /// match the parameter sizes the cubin records. Dynamic shared memory above 48 KiB
    /// is allowed for the entry first. Device pointers are not checked (a bad one is a
    /// device fault the driver reports on a later call, as with any launch).
    pub fn launch(
        &self,
        entry: &str,
        dims: LaunchDims,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        self.launch_inner(entry, dims, None, stream, args, None)
    }

    /// [`launch`](Self::launch) with thread-block clusters of `cluster` blocks (x, y,
    /// z), through `cuLaunchKernelEx`; the grid must be a multiple of the cluster.
    pub fn launch_cluster(
        &self,
        entry: &str,
        dims: LaunchDims,
        cluster: (u32, u32, u32),
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        let (g, c) = (dims.grid, cluster);
        if c.0 == 0
            || c.1 == 0
            || c.2 == 0
            || !g.0.is_multiple_of(c.0)
            || !g.1.is_multiple_of(c.1)
            || !g.2.is_multiple_of(c.2)
        {
            return Err(Error::usage(
                format!(
                    "{}: grid {g:?} is not a whole number of clusters {c:?}",
                    self.artifact.describe()
                ),
                Some("make each grid side a multiple of the cluster's".into()),
            ));
        }
        self.launch_inner(entry, dims, Some(cluster), stream, args, None)
    }

    fn launch_inner(
        &self,
        entry: &str,
        dims: LaunchDims,
        cluster: Option<(u32, u32, u32)>,
        stream: &CudaStream,
        args: &[KernelArg],
        problem: Option<&crate::model::Problem>,
    ) -> Result<()> {
        let function = self.function(entry)?;
        let info = self
            .artifact
            .entries
            .iter()
            .find(|e| e.name == entry)
            .ok_or_else(|| Error::NotLoadable {
                message: format!("{} has no entry `{entry}`", self.artifact.describe()),
                hint: None,
            })?;
        check_args(&self.artifact.describe(), info, args)?;
        if let Some(tracer) = crate::trace::tracer()
            && self.traced.first(problem)
        {
            tracer.write(&crate::trace::TraceRecord::Launch {
                kernel: self.artifact.kernel.clone(),
                config: self.artifact.config.clone(),
                target: self.artifact.target.clone(),
                digest: self.artifact.digest.clone(),
                problem: problem.cloned(),
                gpu: self.gpu_name.to_string(),
                capability: self.capability.to_string(),
            });
        }
        if dims.shared_bytes > 48 * 1024 {
            self.allow_dynamic_shared(entry, dims.shared_bytes)?;
        }
        // One 8-byte slot per argument, little-endian: the driver copies `size` bytes
        // from each pointer.
        // Tensor maps and structs are passed from their own bytes.
        let mut slots: Vec<u64> = args.iter().map(KernelArg::bits).collect();
        let mut pointers: Vec<*mut std::ffi::c_void> = slots
            .iter_mut()
            .zip(args)
            .map(|(slot, arg)| match arg {
                KernelArg::TensorMap(map) => (&map.0 as *const u64).cast_mut().cast(),
                KernelArg::Struct(bytes) => bytes.as_ptr().cast_mut().cast(),
                _ => (slot as *mut u64).cast(),
            })
            .collect();
        stream
            .context()
            .bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        if let Some((x, y, z)) = cluster {
            // SAFETY: an all-zero launch attribute is valid; the cluster dimension is
            // the union member its id selects.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = x;
            attr.value.clusterDim.y = y;
            attr.value.clusterDim.z = z;
            let config = sys::CUlaunchConfig {
                gridDimX: dims.grid.0,
                gridDimY: dims.grid.1,
                gridDimZ: dims.grid.2,
                blockDimX: dims.block.0,
                blockDimY: dims.block.1,
                blockDimZ: dims.block.2,
                sharedMemBytes: dims.shared_bytes,
                hStream: stream.cu_stream(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for cuLaunchKernel below; `config` and `attr` outlive the call.
            return unsafe {
                sys::cuLaunchKernelEx(
                    &config,
                    function.cu_function(),
                    pointers.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .result()
            .map_err(driver_err("cuLaunchKernelEx"));
        }
        // SAFETY: `function` and `stream` are live handles of this context; `pointers`
        // holds one pointer per kernel parameter (checked above), each to as many bytes
        // as the parameter's size, alive until the call returns (it copies them).
        unsafe {
            sys::cuLaunchKernel(
                function.cu_function(),
                dims.grid.0,
                dims.grid.1,
                dims.grid.2,
                dims.block.0,
                dims.block.1,
                dims.block.2,
                dims.shared_bytes,
                stream.cu_stream(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(driver_err("cuLaunchKernel"))
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
        loaded.launch = match rt.lock().launch(&artifact.kernel) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cubin::EntryInfo;

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
}
