//! Where a compile's time goes, for benchmarks: with `KART_NVCC_TIME` set to a folder,
//! every nvcc run kart starts also writes nvcc's own table of its phases (`--time`:
//! preprocessing, `cicc`, `ptxas`, the driver) into a CSV file of that folder, and a
//! batch adds one row per `ptxas` kart runs itself, in nvcc's columns. The file's name
//! says the kernel, whether the run was one config or a batch, and how many configs it
//! built: `<kernel>.alone.1.<n>.csv`, `<kernel>.batch.<configs>.<n>.csv`.
//!
//! Measurement only: `--time` changes no output byte (checked by `bench/nvcc_phases.sh`
//! against the committed lock), so the variable is not part of any key.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The variable naming the folder for the tables.
pub const VAR: &str = "KART_NVCC_TIME";

/// The table file for one nvcc run of `kernel` building `configs` configs, if
/// [`VAR`] is set; `None` otherwise.
pub fn table(kernel: &str, configs: usize) -> Option<PathBuf> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::var_os(VAR).filter(|v| !v.is_empty())?;
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let mode = if configs == 1 { "alone" } else { "batch" };
    Some(PathBuf::from(dir).join(format!(
        "{kernel}.{mode}.{configs}.{}-{run}.csv",
        std::process::id()
    )))
}

/// Adds nvcc's `--time` to `args` when there is a table to write.
pub fn add_time_arg(args: &mut Vec<String>, table: Option<&Path>) {
    if let Some(table) = table {
        args.push("--time".into());
        args.push(table.display().to_string());
    }
}

/// Appends one `ptxas` row (run by kart, not nvcc) to `table`, in nvcc's columns. A
/// failure to write is ignored: this is a measurement, never a reason to fail a build.
pub fn add_ptxas_row(table: Option<&Path>, ptx: &Path, cubin: &Path, arch: &str, took: Duration) {
    let Some(table) = table else { return };
    let row = format!(
        " , ptxas , {} , {} , {arch} , kart , {:.4} , ms\n",
        ptx.display(),
        cubin.display(),
        took.as_secs_f64() * 1000.0
    );
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(table) {
        let _ = f.write_all(row.as_bytes());
    }
}
