//! Interrupt coalescing (paper 004 §3.4): a NIC raises a notification after N frames have
//! arrived, or T after the first frame that no notification has covered yet, whichever
//! comes first. N = 1 (or T = 0) is one notification per frame.
//!
//! The model is exact in the times of arrival, not in the times the host happens to look:
//! frames are fed in order of arrival with their arrival time, and a timer that ran out
//! between two arrivals raised its notification before the later frame arrived, even if
//! nobody looked in between. A notification is a latch: several raised before the host
//! takes one are one interrupt, as on real hardware.

use crate::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub(crate) struct Coalescer {
    frames: usize,
    time: Duration,
    /// Frames arrived since the last notification, still in the receive queue.
    unnotified: usize,
    /// Arrival time of the oldest of them.
    first_at: Option<Instant>,
    /// When the pending notification was raised, if one is.
    raised: Option<Instant>,
    /// Notifications raised (latched ones counted once).
    raised_total: u64,
}

impl Coalescer {
    /// `frames` is at least 1 (the caller validates it).
    pub fn new(frames: usize, time: Duration) -> Coalescer {
        Coalescer {
            frames: frames.max(1),
            time,
            unnotified: 0,
            first_at: None,
            raised: None,
            raised_total: 0,
        }
    }

    /// A frame arrived at `at` (arrivals come in order).
    pub fn arrive(&mut self, at: Instant) {
        self.tick(at);
        if self.unnotified == 0 {
            self.first_at = Some(at);
        }
        self.unnotified += 1;
        if self.unnotified >= self.frames {
            self.raise(at);
        }
    }

    /// Runs the timer up to `now`.
    pub fn tick(&mut self, now: Instant) {
        if let Some(first) = self.first_at {
            let due = first + self.time;
            if now >= due {
                self.raise(due);
            }
        }
    }

    fn raise(&mut self, at: Instant) {
        if self.raised.is_none() {
            self.raised = Some(at);
            self.raised_total += 1;
        }
        self.unnotified = 0;
        self.first_at = None;
    }

    /// Takes the pending notification, if any, after running the timer to `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        self.tick(now);
        self.raised.take().is_some()
    }

    /// The host took a frame from the front of the receive queue, which now holds
    /// `remaining` frames; `arrival(i)` is the arrival time of the `i`-th of them. Frames
    /// the host took need no notification, so un-notified ones the host took are
    /// forgotten and the timer restarts from the oldest left.
    pub fn taken(&mut self, remaining: usize, arrival: impl Fn(usize) -> Option<Instant>) {
        if self.unnotified > remaining {
            self.unnotified = remaining;
            self.first_at = if remaining == 0 { None } else { arrival(0) };
        }
    }

    /// When the timer runs out, or when the pending notification was raised.
    pub fn next_deadline(&self) -> Option<Instant> {
        let timer = self.first_at.map(|f| f + self.time);
        match (self.raised, timer) {
            (Some(r), Some(t)) => Some(r.min(t)),
            (r, t) => r.or(t),
        }
    }

    /// Frames arrived and not yet covered by a notification.
    pub fn unnotified(&self) -> usize {
        self.unnotified
    }

    #[cfg(test)]
    pub fn raised_total(&self) -> u64 {
        self.raised_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    #[test]
    fn one_per_frame() {
        let mut c = Coalescer::new(1, Duration::ZERO);
        assert!(!c.take(us(0)));
        c.arrive(us(1));
        assert!(c.take(us(1)));
        assert!(!c.take(us(1)));
        // Two frames before the host looks: one latched interrupt.
        c.arrive(us(2));
        c.arrive(us(3));
        assert_eq!(c.next_deadline(), Some(us(2)));
        assert!(c.take(us(3)));
        assert!(!c.take(us(4)));
        assert_eq!(c.raised_total(), 2);
    }

    #[test]
    fn n_frames_or_t_whichever_first() {
        let mut c = Coalescer::new(4, Duration::from_micros(100));
        for t in [0, 10, 20] {
            c.arrive(us(t));
            assert!(!c.take(us(t)));
        }
        assert_eq!(c.next_deadline(), Some(us(100)));
        c.arrive(us(30));
        assert!(c.take(us(30)), "the fourth frame");
        assert_eq!(c.next_deadline(), None);
        c.arrive(us(40));
        assert!(!c.take(us(139)));
        assert!(c.take(us(140)), "the timer of the frame at 40");
        // The timer ran out between two arrivals while nobody looked: the later frame
        // starts a new window.
        c.arrive(us(200));
        c.arrive(us(350));
        assert_eq!(c.unnotified(), 1);
        assert!(c.take(us(350)));
        assert!(!c.take(us(449)));
        assert!(c.take(us(450)));
        assert_eq!(c.raised_total(), 4);
    }

    #[test]
    fn frames_the_host_took_need_no_notification() {
        let mut c = Coalescer::new(8, Duration::from_micros(50));
        c.arrive(us(0));
        c.arrive(us(10));
        // The host polled and took the first; the timer now runs from the second.
        c.taken(1, |_| Some(us(10)));
        assert_eq!(c.next_deadline(), Some(us(60)));
        c.taken(0, |_| None);
        assert_eq!(c.next_deadline(), None);
        assert!(!c.take(us(1000)));
    }
}
