//! kart (kernel artifacts): compile every configuration of a set of CUDA kernels to
//! cubin offline, store each binary under the sha256 of its bytes, and load them at run
//! time through the CUDA driver with no nvcc, NVRTC or JIT on the hot path.
//!
//! This crate builds; the `kart-runtime` crate loads. The runtime crate's modules are
//! re-exported here under their own names ([`store`], [`runtime`], [`model`], …), so a
//! build tool and a loader share one vocabulary. The modules of this crate, grouped in
//! the order data flows through them (project → toolchain → pipeline → lock → deploy).
//! `scripts/check-layout` keeps three promises about their imports: no circle between
//! top-level modules, none between the files of one folder, and no module importing an
//! item its parent defines in the parent's own file (a parent may use its children,
//! not the other way round). Within those rules a module may import any other:
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
//! - [`pipeline`]: the build and nothing after it — the action key
//!   ([`pipeline::key`]), one nvcc run ([`pipeline::compile`], [`pipeline::process`]),
//!   the built-in smoke kernel ([`pipeline::smoke`]; launching it is the runtime
//!   crate's [`smoke`]), and planning and running a build up to the lock (a folder
//!   named `build/` would be taken for build output by some tools);
//! - [`deploy`]: after the lock — `verify`, `gc` and `ls` ([`deploy::maintain`]),
//!   `kart.attest` ([`deploy::attest`]), offline tuning ([`deploy::tune`]; `kart.tune`
//!   and `best()` are the runtime crate's), what each GPU of a fleet loads
//!   ([`deploy::coverage`]) and one file of just that ([`deploy::bundle`]);
//!   [`export`]: a self-contained Python module of cubins and a loader;
//! - [`init`]: `kart init`, a new project.
#![deny(missing_docs)]

pub mod deploy;
pub mod export;
pub mod init;
pub mod install;
pub mod pipeline;
pub mod pool;
pub mod project;
pub mod remote;
pub mod toolchain;
pub mod tree;
pub mod workspace;

pub use kart_runtime::{Error, Result};
pub use kart_runtime::{
    call, cubin, digest, error, expr, failpoint, launch, locate, model, resolve, runtime,
    signature, smoke, store, suggest, target, text, trace, untrusted,
};
