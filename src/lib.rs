//! kart (kernel artifacts): compile every configuration of a set of CUDA kernels to
//! cubin offline, store each binary under the sha256 of its bytes, and load them at run
//! time through the CUDA driver with no nvcc, NVRTC or JIT on the hot path.
//!
//! The pieces, each one job:
//! - [`manifest`]: `kart.toml` and `kernel.toml`, the param grid;
//! - [`toolchain`]: finding nvcc and fingerprinting it;
//! - [`key`]: the action key over every input of an artifact;
//! - [`compile`] and [`process`]: one nvcc run, under a timeout, checked;
//! - [`cubin`]: what a cubin says about itself;
//! - [`signature`]: declared kernel parameter kinds;
//! - [`store`]: the content-addressed local store;
//! - [`lockfile`]: the `kart.lock` file;
//! - [`remote`]: the shared cache over HTTP or a folder;
//! - [`transfer`]: `fetch`, `push`, and the build's read- and write-through;
//! - [`build`]: planning and running a build, the `--locked` check;
//! - [`maintain`]: `verify`, `gc`, `ls`;
//! - [`resolve`]: which artifact a device can run;
//! - [`runtime`]: the hot path, loading verified cubins through the driver;
//! - [`attest`]: `kart.attest`, which blobs were proven on which GPU;
//! - [`export`]: a self-contained Python module of cubins and a loader;
//! - [`tune`]: offline tuning, `kart.tune` and `best()`.
#![deny(missing_docs)]

pub mod attest;
pub mod build;
pub mod compile;
pub mod cubin;
pub mod digest;
pub mod error;
pub mod export;
pub mod failpoint;
pub mod fsutil;
pub mod key;
pub mod lockfile;
pub mod maintain;
pub mod manifest;
pub mod process;
pub mod remote;
pub mod resolve;
pub mod runtime;
pub mod signature;
pub mod smoke;
pub mod store;
pub mod target;
pub mod toolchain;
pub mod transfer;
pub mod tune;

pub use error::{Error, Result};
