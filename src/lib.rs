//! kart (kernel artifacts): compile every configuration of a set of CUDA kernels to
//! cubin offline, store each binary under the sha256 of its bytes, and load them at run
//! time through the CUDA driver with no nvcc, NVRTC or JIT on the hot path.
//!
//! This crate builds; the `kart-runtime` crate loads. The runtime crate's modules are
//! re-exported here under their own names ([`store`], [`runtime`], [`model`], …), so a
//! build tool and a loader share one vocabulary. The modules of this crate, in the
//! order data flows through them (no two import each other, directly or through
//! others: `scripts/check-layout` checks that there is no circle):
//! - [`pool`]: the one worker pool and the reporter that shows nothing; [`tree`]: a
//!   folder's files and their content hash;
//! - [`project`]: the project language, `kart.toml` and `kernel.toml` read and checked
//!   ([`project::manifest`]), a kernel ([`project::kernel`]), its grid
//!   ([`project::grid`]) and template entries ([`project::entry`]);
//! - [`install`]: `kart toolchain`, nvcc, components and header libraries from PyPI
//!   into a per-user folder; [`toolchain`]: the installed nvcc found, checked and
//!   fingerprinted, and the header libraries pinned ([`toolchain::library`]);
//! - [`workspace`]: a project opened with its store, what every command starts from;
//! - [`remote`]: the remote caches, one [`store::Storage`] per kind of server (HTTP, a
//!   folder, a Remote Execution API server over [`remote::grpc`]), and copies between
//!   two storages ([`remote::transfer`]);
//! - [`pipeline`]: the build — the action key ([`pipeline::key`]), one nvcc run
//!   ([`pipeline::compile`], [`pipeline::process`]), the built-in smoke kernel
//!   ([`pipeline::smoke`]), and planning and running a build (a folder named `build/`
//!   would be taken for build output by some tools);
//! - after the lock: [`maintain`] (`verify`, `gc`, `ls`), [`attest`] (`kart.attest`),
//!   [`tune`] (offline tuning; `kart.tune` and `best()` are the runtime crate's),
//!   [`export`] (a self-contained Python module of cubins and a loader), [`coverage`]
//!   (what each GPU of a fleet loads, whether it is tuned and attested there), and
//!   [`bundle`] (one file of just that, for the runtime crate to load);
//! - [`init`]: `kart init`, a new project.
#![deny(missing_docs)]

pub mod attest;
pub mod bundle;
pub mod coverage;
pub mod export;
pub mod init;
pub mod install;
pub mod maintain;
pub mod pipeline;
pub mod pool;
pub mod project;
pub mod remote;
pub mod toolchain;
pub mod tree;
pub mod tune;
pub mod workspace;

pub use kart_runtime::{Error, Result};
pub use kart_runtime::{
    call, cubin, digest, error, expr, failpoint, launch, locate, model, resolve, runtime,
    signature, store, suggest, target, text, trace, untrusted,
};
