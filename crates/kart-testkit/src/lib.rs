//! What kart's tests, benchmarks and reliability campaigns share and the product does
//! not: real cache servers on loopback, HTTP ([`nginx`]), S3 ([`moto`]) and the Remote
//! Execution API ([`buildgrid`]), and a BuildGrid with remote execution ([`bgd_exec`],
//! over a throwaway [`postgres`]).
#![deny(missing_docs)]

pub mod bgd_exec;
pub mod buildgrid;
pub mod moto;
pub mod nginx;
pub mod postgres;

use std::path::{Path, PathBuf};

/// The pinned nvcc of kart's repository at `repo`, as `scripts/setup` installs it (it
/// points `.toolchain/py` at `kart toolchain install`'s install); panics with what to
/// run when it is missing.
pub fn pinned_nvcc(repo: &Path) -> PathBuf {
    let nvcc = repo.join(".toolchain/py/nvidia/cu13/bin/nvcc");
    assert!(
        nvcc.is_file(),
        "the pinned nvcc is not installed at {}: run scripts/setup first",
        nvcc.display()
    );
    nvcc
}
