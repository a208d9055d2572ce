//! The project language: `kart.toml` and each `kernels/<name>/kernel.toml`, read,
//! checked and turned into a [`Project`] of [`Kernel`]s. Pure file reading: no
//! toolchain, no store. Each error names the file, line and column and what to write
//! instead.
//!
//! - [`manifest`]: parsing and validation, and [`Project`];
//! - [`kernel`]: a checked [`Kernel`];
//! - [`grid`]: the params' grid, `require` rules and `[derived]` params;
//! - [`entry`]: template entries and the translation unit that instantiates them;
//! - [`library`]: header libraries as declared;
//! - [`fleet`]: the GPUs a deployment runs on (`[[fleet]]`);
//! - [`problem_params`]: params bound to problem keys, and launch-only params;
//! - [`prune`]: `[prune]`, bounds on what ptxas reports, applied after compile.
//!
//! The expression language and `[launch]` are the runtime crate's
//! ([`kart_runtime::expr`], [`kart_runtime::launch`]): a loader evaluates them too.

pub mod entry;
pub mod fleet;
pub mod grid;
mod grid_toml;
pub mod kernel;
mod kernel_toml;
mod launch_toml;
pub mod library;
pub mod manifest;
pub mod problem_params;
pub mod prune;
mod raw;
mod unit_toml;

pub use kernel::{Kernel, ParamMacros, VariantOf};
pub use kernel_toml::KERNEL_FILE;
pub use manifest::{
    BrokenKernel, DEFAULT_EXECUTOR_JOBS, ExecutorConfig, PROJECT_FILE, Project, RemoteConfig,
};
