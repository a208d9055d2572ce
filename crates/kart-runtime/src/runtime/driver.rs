//! The CUDA driver itself: whether it is there, its version, its devices, and a typed
//! error for each call that fails.

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction};

use crate::error::{Error, Result};

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

pub(crate) fn driver_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
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

/// With lazy loading (`CUDA_MODULE_LOADING=LAZY`, the default) a function is only
/// really loaded at its first launch; `cuFuncLoad` (CUDA 12.4+) loads it now, so a
/// broken image fails here and not inside a timed region. Older drivers have no
/// `cuFuncLoad`; reading an attribute forces the load there.
pub(crate) fn force_load(f: &CudaFunction, driver_version: i32) -> Result<()> {
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
