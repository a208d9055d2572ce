//! kart's runtime: what a program that runs kernels needs and nothing more. It reads
//! `kart.lock`, `kart.tune` and the content-addressed store, picks the artifact a GPU
//! should run, checks its sha256, loads it through the CUDA driver (loaded at run time:
//! a program using this crate starts on a machine without CUDA), and launches it with
//! the geometry and arguments the kernel declared. No nvcc, NVRTC or JIT, and no build
//! machinery: the `kart` crate builds on this one.
//!
//! The modules, from the ground up (`scripts/check-layout` keeps them free of import
//! circles and of children importing their parents' items; it does not check this
//! order):
//! - [`error`], [`digest`], [`untrusted`] (checks of text read from files and
//!   remotes), [`failpoint`], [`target`]: the ground floor;
//! - [`expr`] (the expression language of `require`, `[derived]` and `[launch]`),
//!   [`model`] (configs, param values, artifact kinds, problems), [`text`] (reading a
//!   TOML file with errors at line and column), [`locate`] (finding a project and its
//!   store), [`suggest`] (did-you-mean for names);
//! - [`call`] and [`launch`]: how a kernel is called (`[launch]`, `[launch.args]`);
//!   [`signature`]: the parameter kinds an entry declares, checked against the cubin;
//! - [`store`]: the store, `kart.lock` and the committed sidecar files;
//! - [`resolve`]: which artifact a GPU runs; [`runtime`]: verifying, loading and
//!   launching; what a cubin says about
//!   itself ([`cubin`]), tensor maps ([`runtime::tma`]), `doctor`'s checks;
//! - [`tune`]: `kart.tune` and `best()`; [`trace`]: what a workload launched;
//!   [`smoke`]: launching the smoke kernel kart ships, checked against the CPU.
#![deny(missing_docs)]

pub mod call;
pub mod cubin;
pub mod digest;
pub mod error;
pub mod expr;
pub mod failpoint;
pub mod launch;
pub mod locate;
pub mod model;
pub mod resolve;
pub mod runtime;
pub mod signature;
pub mod smoke;
pub mod store;
pub mod suggest;
pub mod target;
pub mod text;
pub mod trace;
pub mod tune;
pub mod untrusted;

/// The driver bindings kart loads through, for device buffers and streams beside
/// kart's launches: the version kart's types are built on.
pub use cudarc;
pub use error::{Error, Result};
pub use model::{ArtifactKind, Config, ParamValue, Problem};
pub use runtime::{Gpu, LoadedArtifact, Runtime};
