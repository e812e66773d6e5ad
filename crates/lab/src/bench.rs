//! The timing harness every lab experiment uses: a warm-up, then the median of several
//! samples, each long enough that the clock's resolution and the loop overhead vanish.
//!
//! Benchmarks report; they never assert (../shared/reference/fast-stacks.md §5 and the
//! project's rules): a slow or noisy machine changes the figures, not the outcome.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// How hard to measure.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// Samples whose median is reported (after one warm-up sample).
    pub samples: usize,
    /// Minimum wall time of one sample.
    pub sample_time: Duration,
}

impl Effort {
    pub const QUICK: Effort = Effort {
        samples: 5,
        sample_time: Duration::from_millis(2),
    };
    pub const FULL: Effort = Effort {
        samples: 11,
        sample_time: Duration::from_millis(10),
    };
}

/// A named piece of work that runs `n` times per call (the loop is inside, so the timing
/// includes no indirect call per iteration).
pub struct Case<'a> {
    pub name: String,
    pub run: Box<dyn FnMut(u64) + 'a>,
}

impl<'a> Case<'a> {
    pub fn new(name: impl Into<String>, mut f: impl FnMut() + 'a) -> Case<'a> {
        Case {
            name: name.into(),
            run: Box::new(move |n| {
                for _ in 0..n {
                    f();
                }
            }),
        }
    }
}

/// Median nanoseconds per call of each case, measured round-robin: every round times one
/// batch of each case in turn, so a slow spell of the machine (another tenant, a frequency
/// change) hits all cases alike and their ratios stay fair. One warm-up round first, which
/// also sizes each case's batch to a sample's time.
pub fn round_robin(effort: Effort, cases: &mut [Case<'_>]) -> Vec<f64> {
    let batches: Vec<u64> = cases
        .iter_mut()
        .map(|c| {
            let mut batch: u64 = 1;
            loop {
                let t = Instant::now();
                (c.run)(batch);
                if t.elapsed() >= effort.sample_time || batch >= 1 << 40 {
                    break batch;
                }
                batch *= 2;
            }
        })
        .collect();
    let mut samples = vec![Vec::with_capacity(effort.samples); cases.len()];
    for _ in 0..effort.samples.max(1) {
        for (i, c) in cases.iter_mut().enumerate() {
            let t = Instant::now();
            (c.run)(batches[i]);
            samples[i].push(t.elapsed().as_nanos() as f64 / batches[i] as f64);
        }
    }
    samples.iter_mut().map(|s| median(s)).collect()
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &mut [f64]) -> f64 {
    assert!(!xs.is_empty(), "median of nothing");
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Gigabytes (10^9 bytes) per second for `bytes` processed in `ns`.
pub fn gbps(bytes: usize, ns: f64) -> f64 {
    bytes as f64 / ns
}

/// Keeps a computed value alive so the optimiser cannot drop the work.
#[inline(always)]
pub fn keep<T>(x: T) {
    black_box(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn round_robin_gives_one_figure_per_case() {
        let effort = Effort {
            samples: 3,
            sample_time: Duration::from_micros(200),
        };
        let mut small = 0u64;
        let mut big = 0u64;
        let mut cases = [
            Case::new("small", || small = small.wrapping_add(black_box(1))),
            Case::new("big", || {
                for i in 0..200u64 {
                    big = big.wrapping_add(black_box(i));
                }
            }),
        ];
        let ns = round_robin(effort, &mut cases);
        assert_eq!(ns.len(), 2);
        assert!(ns.iter().all(|x| *x > 0.0 && x.is_finite()));
    }
}
