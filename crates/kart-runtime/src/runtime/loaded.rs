//! A loaded artifact: a verified module with every entry resolved, and its launches
//! (geometry from `[launch]`, arguments checked against the signature, tensor maps).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaModule, CudaStream};

use super::args::{KernelArg, LaunchDims, check_args};
use super::driver::driver_err;
use super::tma;
use crate::error::{Error, Result};
use crate::expr::{Env, Layered, Value};
use crate::resolve::Capability;
use crate::signature::ParamKind;
use crate::store::lockfile::LockedArtifact;

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
    pub(super) functions: Vec<(String, CudaFunction)>,
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
    pub(super) traced: crate::trace::Seen,
    /// Tensor maps `[launch.args]` made, by (parameter, pointer, shape, tile, swizzle,
    /// L2 promotion): a repeated launch on the same tensors encodes nothing.
    pub(super) made_maps: std::sync::Mutex<HashMap<MapKey, tma::TensorMap>>,
}

pub(super) type MapKey = (usize, u64, Vec<u64>, Vec<u32>, u32, u32);

/// The launch attributes of one launch, set through `cuLaunchKernelEx`.
#[derive(Clone, Copy, Debug, Default)]
struct Attributes {
    /// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
    cluster: Option<(u32, u32, u32)>,
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
    pdl: bool,
}

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
        let g = self.geometry(problem)?;
        Ok(LaunchDims {
            grid: g.grid,
            block: g.block,
            shared_bytes: g.shared_bytes,
        })
    }

    /// Everything the kernel's `[launch]` computes for this config and `problem`: the
    /// [`dims`](Self::dims), its thread-block cluster and whether it allows
    /// programmatic dependent launch. A grid that is not a whole number of clusters is
    /// an error.
    pub fn geometry(&self, problem: &crate::model::Problem) -> Result<crate::launch::Geometry> {
        let Some(spec) = &self.launch else {
            return Err(Error::usage(
                format!(
                    "kernel `{}` declares no [launch] in kernel.toml",
                    self.artifact.kernel
                ),
                Some("add a [launch] table (grid, block, shared_mem), rebuild kart.lock, or pass LaunchDims to `launch`".into()),
            ));
        };
        spec.geometry(
            &self.artifact.config,
            &self.artifact.derived,
            &Layered(problem, &LaunchBuiltins { multiprocessors: self.multiprocessors }),
        )
        .map_err(|e| {
            let keys: Vec<&str> = problem.keys().map(String::as_str).collect();
            let hint = match e {
                crate::launch::GeometryError::NotWholeClusters { .. } => {
                    "make [launch] grid a multiple of [launch] cluster for every problem (for example grid = [\"cdiv(N, BLOCK * CLUSTER) * CLUSTER\"])".to_string()
                }
                _ => format!(
                    "the problem has {}; [launch] may use the config's params, derived params and the problem's keys",
                    if keys.is_empty() { "no keys".to_string() } else { keys.join(", ") }
                ),
            };
            Error::usage(format!("{}: {e}", self.artifact.describe()), Some(hint))
        })
    }

    /// Launches `entry` with the geometry `[launch]` computes for `problem`: the caller
    /// passes arguments and the problem, no launch arithmetic. A `[launch] cluster`
    /// launches in thread-block clusters and `pdl` allows programmatic dependent
    /// launch, both through `cuLaunchKernelEx`.
    pub fn launch_problem(
        &self,
        entry: &str,
        problem: &crate::model::Problem,
        stream: &CudaStream,
        args: &[KernelArg],
    ) -> Result<()> {
        let g = self.geometry(problem)?;
        let dims = LaunchDims {
            grid: g.grid,
            block: g.block,
            shared_bytes: g.shared_bytes,
        };
        let attrs = Attributes {
            cluster: g.cluster,
            pdl: g.pdl,
        };
        match self.launch.as_ref().and_then(|l| l.args.get(entry)) {
            None => self.launch_inner(entry, dims, attrs, stream, args, Some(problem)),
            Some(spec) => {
                let made = self.call_args(entry, spec, problem, args)?;
                self.launch_inner(entry, dims, attrs, stream, &made, Some(problem))
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
                    l2_promotion,
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
                    let key: MapKey = (i, ptr, shape, tile, swizzle, l2_promotion);
                    if let Ok(made) = self.made_maps.lock()
                        && let Some(map) = made.get(&key)
                    {
                        return Ok(KernelArg::TensorMap(*map));
                    }
                    let dtype = tma::TmaType::from_name(&dtype).ok_or_else(|| {
                        Error::usage(format!("{}: unknown tensor map type `{dtype}`", what()), None)
                    })?;
                    // make_args checked both against the legal values.
                    let swizzle = tma::Swizzle::from_bytes(swizzle).unwrap_or(tma::Swizzle::None);
                    let l2 = tma::L2Promotion::from_bytes(l2_promotion)
                        .unwrap_or(tma::L2Promotion::B128);
                    let map = tma::TensorMap::tiled_with(
                        dtype, ptr, &key.2, &strides, &key.3, swizzle, l2,
                    )?;
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
        self.launch_inner(entry, dims, Attributes::default(), stream, args, None)
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
        let attrs = Attributes {
            cluster: Some(cluster),
            pdl: false,
        };
        self.launch_inner(entry, dims, attrs, stream, args, None)
    }

    fn launch_inner(
        &self,
        entry: &str,
        dims: LaunchDims,
        attrs: Attributes,
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
        if attrs.cluster.is_some() || attrs.pdl {
            // SAFETY: an all-zero launch attribute is valid; each value is the union
            // member its id selects.
            let mut list: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
            let mut count = 0;
            if let Some((x, y, z)) = attrs.cluster {
                let attr = &mut list[count];
                attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                attr.value.clusterDim.x = x;
                attr.value.clusterDim.y = y;
                attr.value.clusterDim.z = z;
                count += 1;
            }
            if attrs.pdl {
                let attr = &mut list[count];
                attr.id =
                    sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
                attr.value.programmaticStreamSerializationAllowed = 1;
                count += 1;
            }
            let config = sys::CUlaunchConfig {
                gridDimX: dims.grid.0,
                gridDimY: dims.grid.1,
                gridDimZ: dims.grid.2,
                blockDimX: dims.block.0,
                blockDimY: dims.block.1,
                blockDimZ: dims.block.2,
                sharedMemBytes: dims.shared_bytes,
                hStream: stream.cu_stream(),
                attrs: list.as_mut_ptr(),
                numAttrs: count as u32,
            };
            // SAFETY: as for cuLaunchKernel below; `config` and `list` outlive the call.
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
