//! Offline tuning: time every config of the lock this GPU can run for a problem,
//! through launches the kernel's own tuning program supplies, and record the winner in
//! the committed `kart.tune` (read back by `best()`, in the runtime crate's
//! [`kart_runtime::tune`], re-exported here).

use kart_runtime::error::{Error, Result};
use kart_runtime::model::Config;
use kart_runtime::runtime::{Gpu, LoadedArtifact, Runtime};
use kart_runtime::store::lockfile::LockedArtifact;
pub use kart_runtime::tune::*;

use crate::project::Kernel;

impl TunedKernel for Kernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn tune_spec(&self) -> Option<&kart_runtime::model::TuneSpec> {
        self.tune.as_ref()
    }
    fn default_config(&self) -> Option<&Config> {
        self.default.as_ref()
    }
}

/// What one config did in a tuning run.
#[derive(Clone, Debug)]
pub struct Trial {
    /// The kernel of the family it belongs to.
    pub kernel: String,
    /// The config.
    pub config: Config,
    /// Its median time in microseconds, or why it was not timed (wrong result, failed
    /// launch).
    pub result: std::result::Result<f64, String>,
}

/// The tuning program's part: running one config on one problem.
pub trait TuneBench {
    /// Runs once on fresh random inputs and compares with a reference: `Ok(Err(why))`
    /// when the result is wrong (the config is then never timed).
    fn check(
        &mut self,
        loaded: &LoadedArtifact,
        config: &Config,
        problem: &Problem,
    ) -> Result<std::result::Result<(), String>>;
    /// Enqueues one run on the GPU's stream, reading input set `rotation` (the program
    /// keeps several, so that the timed runs do not find their inputs in L2).
    fn launch(
        &mut self,
        loaded: &LoadedArtifact,
        config: &Config,
        problem: &Problem,
        rotation: usize,
    ) -> Result<()>;
}

/// Warm-up runs and timed runs per config.
#[derive(Clone, Copy, Debug)]
pub struct TuneSettings {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs (each between two CUDA events); the median counts.
    pub runs: usize,
    /// Bytes of a scratch buffer zeroed on the stream before each timed run (0: none).
    /// Zeroing more than the L2 holds leaves it full of dirty lines of other data, as
    /// the benchmarks flush it, so each run pays for its own reads from memory; and the
    /// GPU is busy with it while the run is launched, so the launch's own latency falls
    /// outside the two events.
    pub flush_bytes: usize,
}

impl Default for TuneSettings {
    fn default() -> Self {
        TuneSettings {
            warmup: 5,
            runs: 30,
            flush_bytes: 256 << 20,
        }
    }
}

fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Driver {
        call,
        message: e.to_string(),
    }
}

/// The median time of `launch` in microseconds: `settings.warmup` untimed calls, then
/// `settings.runs` calls each between two CUDA events on the GPU's stream, each after
/// `settings.flush_bytes` of zeroing. `launch` gets the run's index (to rotate inputs).
pub fn median_time_us(
    gpu: &Gpu,
    settings: TuneSettings,
    launch: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let stream = gpu.stream();
    let ctx = gpu.context();
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut flush = match settings.flush_bytes {
        0 => None,
        n => Some(stream.alloc_zeros::<u8>(n).map_err(driver("cuMemAlloc"))?),
    };
    for i in 0..settings.warmup {
        launch(i)?;
    }
    let mut times = Vec::with_capacity(settings.runs.max(1));
    for i in 0..settings.runs.max(1) {
        let start = ctx.new_event(timing).map_err(driver("cuEventCreate"))?;
        let end = ctx.new_event(timing).map_err(driver("cuEventCreate"))?;
        if let Some(buffer) = flush.as_mut() {
            stream
                .memset_zeros(buffer)
                .map_err(driver("cuMemsetD8Async"))?;
        }
        start.record(&stream).map_err(driver("cuEventRecord"))?;
        launch(settings.warmup + i)?;
        end.record(&stream).map_err(driver("cuEventRecord"))?;
        times.push(
            start
                .elapsed_ms(&end)
                .map_err(driver("cuEventElapsedTime"))? as f64
                * 1e3,
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Times every config of `family` (a kernel and its variants, base first) in the lock
/// that fits `problem`'s exact keys and that this GPU can run: each is checked first (a
/// wrong config never wins), then warmed up and timed with CUDA events, median of
/// `settings.runs`. Returns every trial and the record of the fastest correct one,
/// under the base's name (with `variant` set when a variant won).
pub fn tune_problem(
    rt: &Runtime,
    gpu: &Gpu,
    family: &[&Kernel],
    problem: &Problem,
    settings: TuneSettings,
    bench: &mut dyn TuneBench,
) -> Result<(Vec<Trial>, Option<TuneRecord>)> {
    let Some(base) = family.first() else {
        return Ok((Vec::new(), None));
    };
    let mut configs: Vec<(&Kernel, &Config)> = Vec::new();
    for kernel in family {
        let mut own: Vec<&Config> = rt
            .records(&kernel.name)?
            .iter()
            .filter(|a| a.kernel == kernel.name && matches_exact(*kernel, &a.config, problem))
            .map(|a| &a.config)
            .collect();
        own.sort();
        own.dedup();
        configs.extend(own.into_iter().map(|c| (*kernel, c)));
    }
    let mut trials = Vec::new();
    let mut best: Option<(f64, &Kernel, &Config, LockedArtifact)> = None;
    let mut runner_up: Option<f64> = None;
    for (kernel, config) in configs {
        let Some(artifact) = artifact_for(rt.lock()?, &kernel.name, config, gpu.capability) else {
            continue;
        };
        let loaded = gpu.kernel(rt, &kernel.name, config)?;
        let result = (|| -> Result<std::result::Result<f64, String>> {
            if let Err(why) = bench.check(&loaded, config, problem)? {
                return Ok(Err(format!("wrong result: {why}")));
            }
            let us = median_time_us(gpu, settings, &mut |i| {
                bench.launch(&loaded, config, problem, i)
            })?;
            Ok(Ok(us))
        })();
        let result = match result {
            Ok(r) => r,
            // A launch that fails (too much shared memory on this GPU, say) is reported,
            // not fatal: other configs may run.
            Err(e) => Err(e.with_causes()),
        };
        if let Ok(us) = result {
            match &best {
                Some((b, ..)) if *b <= us => {
                    runner_up = Some(runner_up.map_or(us, |r: f64| r.min(us)));
                }
                _ => {
                    if let Some((b, ..)) = &best {
                        runner_up = Some(runner_up.map_or(*b, |r: f64| r.min(*b)));
                    }
                    best = Some((us, kernel, config, artifact.clone()));
                }
            }
        }
        trials.push(Trial {
            kernel: kernel.name.clone(),
            config: config.clone(),
            result,
        });
    }
    let timed = trials.iter().filter(|t| t.result.is_ok()).count();
    let record = best.map(|(us, kernel, config, artifact)| TuneRecord {
        kernel: base.name.clone(),
        gpu: gpu.name.clone(),
        problem: problem.clone(),
        config: config.clone(),
        variant: (kernel.name != base.name).then(|| kernel.name.clone()),
        target: artifact.target.clone(),
        digest: artifact.digest.clone(),
        median_us: (us * 100.0).round() / 100.0,
        runner_up_us: runner_up.map(|r| (r * 100.0).round() / 100.0),
        timed,
    });
    Ok((trials, record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kart_runtime::resolve::Capability;
    use kart_runtime::store::lockfile::Lockfile;
    use kart_runtime::store::sidecar::Sidecar;
    use std::path::Path;

    proptest::proptest! {
        /// The memoized answer is the unmemoized one, over the repository's own records
        /// and lock and random problems (asked twice, so the second is a cache hit).
        #[test]
        fn the_cache_answers_what_best_answers(
            b in 1i64..64, h in 1i64..64, s in 1i64..8192, d in proptest::sample::select(vec![64i64, 128]),
            causal in 0i64..2, m in 1i64..8192, n in 1i64..8192, k in 1i64..8192,
            gpu in proptest::sample::select(vec!["NVIDIA H200", "NVIDIA H100 80GB HBM3", "other"]),
        ) {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let project = crate::project::Project::discover(root).unwrap();
            let lock = Lockfile::read(&root.join("kart.lock"), Path::new("kart.lock")).unwrap().unwrap();
            let tune = TuneFile::read(&root.join(TUNE_FILE), Path::new(TUNE_FILE)).unwrap();
            let cache = BestCache::new();
            let h100 = Capability { major: 9, minor: 0 };
            let fa: Problem = [("B".into(), b), ("H".into(), h), ("S".into(), s), ("D".into(), d), ("causal".into(), causal)].into();
            let gemm: Problem = [("M".into(), m), ("N".into(), n), ("K".into(), k)].into();
            for (kernel, problem) in [("flash_attn", &fa), ("sgemm", &gemm)] {
                let family = project.family(kernel).unwrap();
                // Errors are compared by kind (exit code) and message; and since both
                // kernels declare a `default`, every problem has an answer: two equal
                // errors would say nothing about the cache.
                let slow = best(&tune, &lock, &family, gpu, h100, problem)
                    .map_err(|e| (e.exit_code(), e.to_string()));
                proptest::prop_assert!(slow.is_ok(), "{kernel}: {slow:?}");
                for _ in 0..2 {
                    let fast = cache.best(&tune, &lock, &family, gpu, h100, problem)
                        .map_err(|e| (e.exit_code(), e.to_string()));
                    proptest::prop_assert_eq!(&fast, &slow);
                }
            }
        }
    }
}
