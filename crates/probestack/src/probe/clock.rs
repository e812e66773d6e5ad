//! The probes' clock: the CPU's timestamp counter where it is invariant (it ticks at a
//! constant rate whatever the core's frequency or sleep state), calibrated once against the
//! operating system's monotonic clock; elsewhere, that monotonic clock itself.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where ticks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `rdtsc` on an invariant TSC.
    Tsc,
    /// `std::time::Instant`, in nanoseconds since the clock was made.
    Monotonic,
}

/// A calibrated tick source.
#[derive(Clone, Copy, Debug)]
pub struct ProbeClock {
    source: Source,
    ns_per_tick: f64,
    base: Instant,
}

impl ProbeClock {
    /// The process-wide clock, calibrated on first use (about 20 ms).
    pub fn get() -> &'static ProbeClock {
        static CLOCK: OnceLock<ProbeClock> = OnceLock::new();
        CLOCK.get_or_init(ProbeClock::calibrate)
    }

    fn calibrate() -> ProbeClock {
        let base = Instant::now();
        if tsc_is_invariant() {
            // Calibrate over ~20 ms, taking the best of three to dodge a preemption.
            let mut best: Option<f64> = None;
            for _ in 0..3 {
                let (t0, c0) = (Instant::now(), rdtsc());
                while t0.elapsed() < Duration::from_millis(7) {
                    std::hint::spin_loop();
                }
                let (ns, c1) = (t0.elapsed().as_nanos() as f64, rdtsc());
                let ticks = c1.wrapping_sub(c0) as f64;
                if ticks > 0.0 {
                    let r = ns / ticks;
                    best = Some(best.map_or(r, |b: f64| b.min(r)));
                }
            }
            if let Some(ns_per_tick) = best {
                return ProbeClock {
                    source: Source::Tsc,
                    ns_per_tick,
                    base,
                };
            }
        }
        ProbeClock {
            source: Source::Monotonic,
            ns_per_tick: 1.0,
            base,
        }
    }

    /// A clock on the monotonic fallback, whatever the CPU (for tests of the fallback).
    pub fn monotonic() -> ProbeClock {
        ProbeClock {
            source: Source::Monotonic,
            ns_per_tick: 1.0,
            base: Instant::now(),
        }
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// Nanoseconds per tick.
    pub fn ns_per_tick(&self) -> f64 {
        self.ns_per_tick
    }

    /// The current tick count.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.source {
            Source::Tsc => rdtsc(),
            Source::Monotonic => self.base.elapsed().as_nanos() as u64,
        }
    }

    /// Ticks to nanoseconds.
    pub fn to_ns(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86_64; it only reads the counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

/// CPUID leaf 0x8000_0007, EDX bit 8: the TSC runs at a constant rate in every P-, C- and
/// T-state (Intel SDM Vol. 3B §18.17; AMD APM Vol. 3, CPUID Fn8000_0007). Hypervisors
/// often hide the bit while giving the guest a stable TSC; Linux then still lists
/// `constant_tsc` and `nonstop_tsc`, which count too.
#[cfg(target_arch = "x86_64")]
fn tsc_is_invariant() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 reports the highest extended leaf, checked before 0x8000_0007.
    let max_ext = __cpuid(0x8000_0000).eax;
    let by_cpuid = max_ext >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
    by_cpuid || linux_says_tsc_is_stable()
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_is_invariant() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn linux_says_tsc_is_stable() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|flags| {
            let has = |f: &str| flags.split_whitespace().any(|x| x == f);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance_and_convert_to_wall_time() {
        for clock in [*ProbeClock::get(), ProbeClock::monotonic()] {
            let t = Instant::now();
            let a = clock.now();
            while t.elapsed() < Duration::from_millis(5) {
                std::hint::spin_loop();
            }
            let b = clock.now();
            let wall = t.elapsed().as_nanos() as f64;
            let ns = clock.to_ns(b - a);
            // Within 20% of wall time: generous, since a preempted test thread stretches both.
            assert!(
                ns > 0.8 * 5e6 && ns < 1.2 * wall + 1e6,
                "{:?}: {ns} ns vs {wall}",
                clock.source()
            );
        }
    }
}
