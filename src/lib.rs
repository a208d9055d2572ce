//! kart (kernel artifacts): compile every configuration of a set of CUDA kernels to
//! cubin offline, store each binary under the sha256 of its bytes, and load them at run
//! time through the CUDA driver with no nvcc, NVRTC or JIT on the hot path.
//!
//! This crate builds; the `kart-runtime` crate loads. Everything of the runtime crate
//! is re-exported here under the same module names ([`store`], [`runtime`], [`model`],
//! …), so a build tool and a loader share one vocabulary. The modules of this crate, in
//! the order data flows through them:
//! - [`build`]: the project language (`kart.toml`, `kernel.toml`: [`build::manifest`],
//!   the grid [`build::grid`], entries [`build::entry`], header libraries), nvcc
//!   ([`build::toolchain`]), the action key ([`build::key`]), one nvcc run
//!   ([`build::compile`], [`build::process`]), and planning and running a build;
//! - [`workspace`]: a project opened with its store, and the check of lock digests;
//! - [`remote`]: the shared cache over HTTP or a folder, and moving artifacts between
//!   it and the store ([`remote::transfer`]);
//! - [`maintain`]: `verify`, `gc`, `ls`;
//! - [`smoke`]: the whole loop on the built-in smoke kernel; [`attest`]: `kart.attest`;
//! - [`tune`]: offline tuning (and, from the runtime crate, `kart.tune` and `best()`);
//! - [`export`]: a self-contained Python module of cubins and a loader.
#![deny(missing_docs)]

pub mod attest;
pub mod build;
pub mod export;
pub mod maintain;
pub mod remote;
pub mod smoke;
pub mod tune;
pub mod workspace;

pub use kart_runtime::{Error, Result};
pub use kart_runtime::{
    call, cubin, digest, error, expr, failpoint, launch, locate, model, resolve, runtime,
    signature, store, target, text, untrusted,
};
