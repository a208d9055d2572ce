//! CPU-side integration tests: the real `kart` binary and the real pinned nvcc on small
//! fixture kernels (installed by `scripts/setup`). No GPU needed.
//!
//! One module per theme; this file holds only the module list and the grid fixture
//! several of them share (the rest of the harness is `harness.rs`).

mod bounds;
mod build;
mod clusters;
mod commands;
mod executor;
mod fleet;
mod harness;
mod language;
mod launch_only;
mod libraries;
mod malformed;
mod nvcc;
mod problems;
mod prune;
mod reapi;
mod remote;
mod s3;
mod settled;
mod sharing;
mod store;
mod templates;
mod toolchain;
mod trust;
mod usability;
mod variants;

use harness::TestProject;

const GRID: &str = "[params]\nA = [1, 2]\nB = [16, 32]\n\n[[exclude]]\nA = 2\nB = 32\n";
const GRID_BODY: &str = "out[threadIdx.x] = A * 1000 + B;";

fn grid_project() -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    p
}
