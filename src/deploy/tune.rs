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
    /// Its median over the run-off's rounds, when it was close enough to the fastest to
    /// be timed again (see [`TuneSettings::runoff_within`]).
    pub runoff_us: Option<f64>,
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
    /// The run-off: configs whose median is within this fraction of the fastest's are
    /// timed again, in turn, round after round, and the lowest median over the rounds
    /// wins. Configs timed one after the other over a sweep of minutes see the clock and
    /// the card's temperature drift by a few percent, as much as the gaps between the
    /// best configs; timed in turn, each round sees the same conditions for all.
    pub runoff_within: f64,
    /// At most this many configs in the run-off (the fastest of the sweep).
    pub runoff_max: usize,
    /// Rounds of the run-off; each times every contender with `runs / 3` timed runs.
    pub runoff_rounds: usize,
}

impl Default for TuneSettings {
    fn default() -> Self {
        TuneSettings {
            warmup: 5,
            runs: 30,
            flush_bytes: 256 << 20,
            runoff_within: 0.03,
            runoff_max: 6,
            runoff_rounds: 5,
        }
    }
}

/// The trials in a run-off: those timed within `within` (a fraction) of the fastest,
/// fastest first, at most `max`; none when fewer than two qualify. `times` holds each
/// timed trial's index and median.
fn runoff_contenders(times: &[(usize, f64)], within: f64, max: usize) -> Vec<usize> {
    let mut sorted: Vec<(usize, f64)> = times
        .iter()
        .copied()
        .filter(|(_, us)| us.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let Some(&(_, fastest)) = sorted.first() else {
        return Vec::new();
    };
    let chosen: Vec<usize> = sorted
        .iter()
        .take_while(|(_, us)| *us <= fastest * (1.0 + within))
        .take(max)
        .map(|(i, _)| *i)
        .collect();
    if chosen.len() < 2 {
        return Vec::new();
    }
    chosen
}

/// The median of `values` (the upper one of an even count), or None when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
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
    // At least one timed run, so there is a median.
    Ok(median(times).unwrap_or(f64::NAN))
}

/// Times every config of `family` (a kernel and its variants, base first) in the lock
/// that fits `problem`'s exact keys and that this GPU can run: each is checked first (a
/// wrong config never wins), then warmed up and timed with CUDA events, median of
/// `settings.runs`; the configs close to the fastest then race again in turn (the
/// run-off, [`TuneSettings::runoff_within`]). Returns every trial and the record of the
/// winner, under the base's name (with `variant` set when a variant won).
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
    let mut timed_artifacts: Vec<Option<LockedArtifact>> = Vec::new();
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
        timed_artifacts.push(result.is_ok().then(|| artifact.clone()));
        trials.push(Trial {
            kernel: kernel.name.clone(),
            config: config.clone(),
            result,
            runoff_us: None,
        });
    }
    let sweep: Vec<(usize, f64)> = trials
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((i, *t.result.as_ref().ok()?)))
        .collect();
    runoff(rt, gpu, problem, settings, bench, &sweep, &mut trials)?;
    let ranked = ranking(&trials);
    let runner_up = ranked.get(1).map(|&(_, us)| us);
    let timed = sweep.len();
    let record = ranked.first().and_then(|&(i, us)| {
        let t = &trials[i];
        let artifact = timed_artifacts[i].as_ref()?;
        Some(TuneRecord {
            kernel: base.name.clone(),
            gpu: gpu.name.clone(),
            problem: problem.clone(),
            config: t.config.clone(),
            variant: (t.kernel != base.name).then(|| t.kernel.clone()),
            target: artifact.target.clone(),
            digest: artifact.digest.clone(),
            median_us: (us * 100.0).round() / 100.0,
            runner_up_us: runner_up.map(|r| (r * 100.0).round() / 100.0),
            timed,
        })
    });
    Ok((trials, record))
}

/// The timed trials, best first, each with the time it is ranked by: the run-off's
/// median where there was a run-off (and then only its contenders), else the sweep's.
fn ranking(trials: &[Trial]) -> Vec<(usize, f64)> {
    let in_runoff = trials.iter().any(|t| t.runoff_us.is_some());
    let mut ranked: Vec<(usize, f64)> = trials
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let us = if in_runoff {
                t.runoff_us?
            } else {
                *t.result.as_ref().ok()?
            };
            Some((i, us))
        })
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    ranked
}

/// The run-off (see [`TuneSettings::runoff_within`]): the sweep's close contenders timed
/// again in turn, `settings.runoff_rounds` rounds of `settings.runs / 3` timed runs each;
/// each contender's median over its rounds' medians goes to its trial's `runoff_us`.
fn runoff(
    rt: &Runtime,
    gpu: &Gpu,
    problem: &Problem,
    settings: TuneSettings,
    bench: &mut dyn TuneBench,
    sweep: &[(usize, f64)],
    trials: &mut [Trial],
) -> Result<()> {
    let contenders = runoff_contenders(sweep, settings.runoff_within, settings.runoff_max);
    if contenders.is_empty() || settings.runoff_rounds == 0 {
        return Ok(());
    }
    let round = TuneSettings {
        warmup: 2,
        runs: (settings.runs / 3).max(1),
        ..settings
    };
    let mut loaded = Vec::with_capacity(contenders.len());
    for &i in &contenders {
        loaded.push(gpu.kernel(rt, &trials[i].kernel, &trials[i].config)?);
    }
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for _ in 0..settings.runoff_rounds {
        for (slot, &i) in contenders.iter().enumerate() {
            let config = trials[i].config.clone();
            let us = median_time_us(gpu, round, &mut |r| {
                bench.launch(&loaded[slot], &config, problem, r)
            })?;
            rounds[slot].push(us);
        }
    }
    for (slot, &i) in contenders.iter().enumerate() {
        trials[i].runoff_us = median(std::mem::take(&mut rounds[slot]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kart_runtime::resolve::Capability;
    use kart_runtime::store::lockfile::Lockfile;
    use kart_runtime::store::sidecar::Sidecar;
    use std::path::Path;

    #[test]
    fn the_run_off_takes_the_close_contenders_fastest_first_and_only_a_race() {
        let sweep = [
            (0, 105.0),
            (1, 100.0),
            (2, 102.9),
            (3, 103.1),
            (4, f64::NAN),
            (5, 101.0),
        ];
        assert_eq!(runoff_contenders(&sweep, 0.03, 6), vec![1, 5, 2]);
        assert_eq!(runoff_contenders(&sweep, 0.03, 2), vec![1, 5]);
        assert_eq!(runoff_contenders(&sweep, 0.06, 6), vec![1, 5, 2, 3, 0]);
        // One config close to nothing else: no race to run.
        assert!(runoff_contenders(&[(0, 100.0), (1, 110.0)], 0.03, 6).is_empty());
        assert!(runoff_contenders(&[], 0.03, 6).is_empty());
        // Ties keep the sweep's order.
        assert_eq!(
            runoff_contenders(&[(3, 50.0), (1, 50.0)], 0.0, 6),
            vec![1, 3]
        );
    }

    #[test]
    fn the_run_off_decides_among_its_contenders_and_the_sweep_decides_without_one() {
        let trial = |result: std::result::Result<f64, String>, runoff_us| Trial {
            kernel: "k".to_string(),
            config: Config::default(),
            result,
            runoff_us,
        };
        // Without a run-off: the sweep's order; a failed config is not ranked.
        let sweep_only = [
            trial(Ok(12.0), None),
            trial(Err("wrong result".to_string()), None),
            trial(Ok(10.0), None),
        ];
        assert_eq!(ranking(&sweep_only), vec![(2, 10.0), (0, 12.0)]);
        // With one: the sweep's fastest (trial 2) lost the race to trial 0, and trial
        // 3, too slow in the sweep for the race, is not ranked.
        let raced = [
            trial(Ok(10.2), Some(10.1)),
            trial(Err("launch failed".to_string()), None),
            trial(Ok(10.0), Some(10.3)),
            trial(Ok(10.6), None),
        ];
        assert_eq!(ranking(&raced), vec![(0, 10.1), (2, 10.3)]);
        assert!(ranking(&[]).is_empty());
    }

    #[test]
    fn the_median_of_rounds_is_the_middle_one() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(Vec::new()), None);
    }
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
