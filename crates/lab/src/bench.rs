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

/// Median nanoseconds per call of `f`, after a warm-up that also picks how many calls one
/// sample makes.
pub fn ns_per_call(effort: Effort, mut f: impl FnMut()) -> f64 {
    // Warm-up and calibration: double the batch until one batch takes a sample's time.
    let mut batch: u64 = 1;
    loop {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        if t.elapsed() >= effort.sample_time || batch >= 1 << 40 {
            break;
        }
        batch *= 2;
    }
    let mut samples: Vec<f64> = (0..effort.samples.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    median(&mut samples)
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
    fn measures_something_positive() {
        let effort = Effort {
            samples: 3,
            sample_time: Duration::from_micros(200),
        };
        let ns = ns_per_call(effort, || keep(black_box(3u64).pow(black_box(5))));
        assert!(ns > 0.0 && ns.is_finite());
    }
}
