//! Launching the smoke kernel that kart ships (its source is the `kart` crate's
//! `kernels/smoke/smoke.cu`): the last step of `kart smoke` and of each attestation,
//! kept beside the runtime that loads it so the build side holds no GPU launch code.

use crate::error::{Error, Result};
use crate::runtime::{Gpu, KernelArg, LaunchDims, LoadedArtifact};
use crate::signature::ParamKind;

/// Its one entry point: `y[i] = a * x[i] + b`.
pub const SMOKE_ENTRY: &str = "kart_smoke_axpb";

/// Its parameters: `(const float* x, float* y, float a, float b, int n)`.
pub const SMOKE_SIGNATURE: [ParamKind; 5] = [
    ParamKind::Ptr,
    ParamKind::Ptr,
    ParamKind::F32,
    ParamKind::F32,
    ParamKind::I32,
];

/// Launches the smoke kernel on `n` random floats (output poisoned with NaN first) and
/// returns the largest relative error against the CPU; an error if it is not tiny.
pub fn launch_smoke(gpu: &Gpu, loaded: &LoadedArtifact, n: usize) -> Result<f64> {
    let driver = |call: &'static str| {
        move |e: cudarc::driver::DriverError| Error::Driver {
            call,
            message: e.to_string(),
        }
    };
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        })
        .collect();
    let (a, b) = (1.5f32, -0.25f32);
    let stream = gpu.stream();
    let x_dev = stream.clone_htod(&x).map_err(driver("cuMemcpyHtoD"))?;
    let mut y_dev = stream
        .clone_htod(&vec![f32::NAN; n])
        .map_err(driver("cuMemcpyHtoD"))?;
    let n_arg = n as i32;
    {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let (x_ptr, _x_sync) = x_dev.device_ptr(&stream);
        let (y_ptr, _y_sync) = y_dev.device_ptr_mut(&stream);
        loaded.launch(
            SMOKE_ENTRY,
            LaunchDims {
                grid: (n.div_ceil(256) as u32, 1, 1),
                block: (256, 1, 1),
                shared_bytes: 0,
            },
            &stream,
            &[
                KernelArg::Ptr(x_ptr),
                KernelArg::Ptr(y_ptr),
                KernelArg::F32(a),
                KernelArg::F32(b),
                KernelArg::I32(n_arg),
            ],
        )?;
    }
    let y = stream.clone_dtoh(&y_dev).map_err(driver("cuMemcpyDtoH"))?;
    let mut worst = 0f64;
    for (i, (&xi, &yi)) in x.iter().zip(&y).enumerate() {
        let want = a.mul_add(xi, b) as f64;
        let err = (yi as f64 - want).abs() / want.abs().max(1e-3);
        if !err.is_finite() || err > 1e-5 {
            return Err(Error::CheckFailed {
                message: format!("smoke kernel result wrong at {i}: got {yi}, want {want}"),
                hint: Some("the GPU, driver or cubin is broken; run `kart doctor`".into()),
            });
        }
        worst = worst.max(err);
    }
    Ok(worst)
}
