//! The one worker pool: `jobs` scoped threads taking items in order from a shared
//! index. Compiles, transfers, digest checks and rebuilds all run through it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` over every item on up to `jobs` threads; the results in the items' order.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    if let Ok(mut all) = results.lock() {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

/// A reporter that shows nothing, for library callers and tests: it stands for every
/// reporter trait of kart (builds, transfers), whose methods all do nothing by default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_order_from_any_number_of_threads() {
        let items: Vec<u32> = (0..100).collect();
        for jobs in [0, 1, 3, 200] {
            let out = super::parallel_map(&items, jobs, |i| i * 2);
            assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        }
    }
}
