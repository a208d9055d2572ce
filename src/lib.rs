//! kart (kernel artifacts): compile every configuration of a set of CUDA kernels to
//! cubin offline, store each binary under the sha256 of its bytes, and load them at run
//! time through the CUDA driver with no nvcc, NVRTC or JIT on the hot path.
//!
//! The folders follow the data path, build → store → lock → remote → runtime → export:
//! - [`build`]: `kernel.toml` and `kart.toml` ([`build::manifest`]), nvcc
//!   ([`build::toolchain`]), the action key ([`build::key`]), one nvcc run
//!   ([`build::compile`], [`build::process`]), the expressions of `require`,
//!   `[derived]` and `[launch]` ([`build::expr`], [`build::grid`]), the arguments kart
//!   makes for a call (`[launch.args]`, [`build::call`]), and planning and running a
//!   build;
//! - [`store`]: the content-addressed local store, `kart.lock` ([`store::lockfile`]),
//!   the committed sidecar files ([`store::sidecar`]), crash-safe writes
//!   ([`store::fsutil`]), and `verify`, `gc`, `ls` ([`store::maintain`]);
//! - [`remote`]: the shared cache over HTTP or a folder, and moving artifacts between
//!   it and the store ([`remote::transfer`]);
//! - [`runtime`]: the hot path, loading verified cubins through the driver; which
//!   artifact a device runs ([`runtime::resolve`]), what a cubin says about itself
//!   ([`runtime::cubin`]), declared parameter kinds ([`runtime::signature`]);
//! - [`export`]: a self-contained Python module of cubins and a loader;
//! - [`tune`]: offline tuning, `kart.tune` and `best()`; [`attest`]: `kart.attest`;
//! - [`smoke`]: the whole loop on the built-in smoke kernel;
//! - shared by all: [`workspace`] (a project with its store), [`error`], [`digest`],
//!   [`target`], [`failpoint`], [`untrusted`] (the checks of what kart reads from files
//!   and remotes).
//!
//! The modules that were once at the crate root are re-exported there under their old
//! names (`kart::manifest`, `kart::lockfile`, `kart::resolve`, …), so code written
//! against those paths keeps compiling.
#![deny(missing_docs)]

pub mod attest;
pub mod build;
pub mod digest;
pub mod error;
pub mod export;
pub mod failpoint;
pub mod remote;
pub mod runtime;
pub mod smoke;
pub mod store;
pub mod target;
pub mod tune;
pub mod untrusted;
pub mod workspace;

pub use build::{compile, key, manifest, process, toolchain};
pub use error::{Error, Result};
pub use remote::transfer;
pub use runtime::{cubin, resolve, signature};
pub use store::{fsutil, lockfile, maintain};
