//! Time as the stack sees it: an [`Instant`] and a [`Duration`] in nanoseconds, and the
//! clocks that give it (DESIGN.md §2). The stack reads no clock of its own; `poll(now)`
//! is told the time, by a [`RealClock`] on real devices or a [`VirtualClock`] that a
//! deterministic test advances by hand.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A point in time, nanoseconds since an arbitrary origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    pub const fn from_micros(us: u64) -> Instant {
        Instant(us.saturating_mul(1_000))
    }

    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Time since `earlier`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_nanos(ns: u64) -> Duration {
        Duration(ns)
    }

    pub const fn from_micros(us: u64) -> Duration {
        Duration(us.saturating_mul(1_000))
    }

    pub const fn from_millis(ms: u64) -> Duration {
        Duration(ms.saturating_mul(1_000_000))
    }

    pub const fn from_secs(s: u64) -> Duration {
        Duration(s.saturating_mul(1_000_000_000))
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        self.0 = self.0.saturating_add(d.0);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// The span between two instants, zero if `rhs` is later.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> std::time::Duration {
        std::time::Duration::from_nanos(d.0)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.0 / 1_000_000_000,
            (self.0 / 1_000) % 1_000_000
        )
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1_000_000 {
            write!(f, "{:.3} ms", self.0 as f64 / 1e6)
        } else {
            write!(f, "{:.3} µs", self.0 as f64 / 1e3)
        }
    }
}

/// A source of the current time.
pub trait Clock {
    fn now(&self) -> Instant;
}

/// The operating system's monotonic clock, from the moment the clock was made.
#[derive(Clone, Copy, Debug)]
pub struct RealClock {
    origin: std::time::Instant,
}

impl RealClock {
    pub fn new() -> RealClock {
        RealClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told: deterministic runs. Clones share the same time, so
/// two stacks and their link can read one clock.
#[derive(Clone, Debug, Default)]
pub struct VirtualClock {
    ns: Arc<AtomicU64>,
}

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    pub fn advance(&self, d: Duration) {
        self.ns.fetch_add(d.0, Ordering::Relaxed);
    }

    /// Moves to `t` if it is later than now.
    pub fn advance_to(&self, t: Instant) {
        self.ns.fetch_max(t.0, Ordering::Relaxed);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        Instant(self.ns.load(Ordering::Relaxed))
    }
}

/// The earlier of two deadlines, either of which may be absent.
#[inline]
pub fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_clocks_move() {
        let t = Instant::from_millis(5);
        assert_eq!((t + Duration::from_micros(1)).as_nanos(), 5_001_000);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(5));
        let v = VirtualClock::new();
        let w = v.clone();
        v.advance(Duration::from_secs(1));
        assert_eq!(w.now(), Instant::from_millis(1000));
        v.advance_to(Instant::from_millis(500));
        assert_eq!(v.now(), Instant::from_millis(1000));
        let r = RealClock::new();
        let a = r.now();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(r.now() > a);
        assert_eq!(Instant::from_micros(1_500_000).to_string(), "1.500000s");
    }

    #[test]
    fn earlier_is_the_minimum_of_the_deadlines_present() {
        let (t1, t2) = (Instant::from_millis(1), Instant::from_millis(2));
        for (a, b, want) in [
            (None, None, None),
            (Some(t1), None, Some(t1)),
            (None, Some(t2), Some(t2)),
            (Some(t2), Some(t1), Some(t1)),
            (Some(t1), Some(t2), Some(t1)),
            (Some(t1), Some(t1), Some(t1)),
        ] {
            assert_eq!(earlier(a, b), want, "{a:?} {b:?}");
        }
    }
}
