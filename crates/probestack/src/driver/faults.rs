//! Seeded fault injection on the memory link's wire.
//!
//! A `Wire` sits between a ring of transmitted frames and the receiving NIC's MAC, one per
//! direction, and does to each frame what a bad network would, in this order:
//!
//! 1. **drop** it (probability [`FaultConfig::drop`]);
//! 2. **duplicate** it ([`FaultConfig::duplicate`]): the copy follows the original, and
//!    each goes through the steps below on its own;
//! 3. **flip bits the CRC catches** ([`FaultConfig::flip_caught`]): one or two distinct bits
//!    anywhere in the frame or its FCS, after the FCS was computed, as noise on a cable
//!    would. CRC-32 detects every one- and two-bit error in a frame of any length Ethernet
//!    allows, so the receiving MAC drops the frame as a bad FCS. Otherwise,
//! 4. **flip a bit and recompute the CRC** ([`FaultConfig::flip_passed`]): one bit after
//!    the Ethernet header, then a fresh FCS, as corruption in a router's memory would be
//!    (the router received a good frame and sends a good frame of bad data). The frame
//!    passes the MAC and reaches the stack corrupted: only an end-to-end checksum can
//!    catch it, the case for keeping one (papers 000 and 003). One bit, because the
//!    Internet checksum detects every single-bit error; two flips in the same bit column
//!    of two 16-bit words, one 0 to 1 and one 1 to 0, cancel in a ones'-complement sum,
//!    the checksum's known blind spot, and would make "nothing corrupted gets through"
//!    untestable;
//! 5. **reorder** it ([`FaultConfig::reorder`]): hold it back and deliver it right after
//!    the next frame that gets this far, or the next [`FaultConfig::reorder_depth`]. A
//!    held frame waits at most [`FaultConfig::reorder_hold`] after it was sent; then it
//!    goes on alone (it was delayed, not reordered). While a frame is held the next ones
//!    are never held, so a reorder always moves one frame back past at most `depth`
//!    others (with depth 1, one swap of two neighbours);
//! 6. **delay** it: every frame takes [`FaultConfig::latency`] plus a uniform jitter in
//!    `0..=jitter` from the moment it was sent (or released from the reorder hold). The
//!    wire is first-in first-out: jitter spreads arrival times but never reorders, so a
//!    frame arrives no earlier than the one before it. Reordering is step 5's alone, and
//!    the two compose: a held frame is delivered no earlier than the frame it follows.
//!
//! Each fault is drawn from a [`Rng`] seeded by [`FaultConfig::seed`], in a fixed order per
//! frame, so the same seed and the same frames give the same faults: a failing run replays.
//! Frames carry the time they were sent, and the wire computes everything from those
//! times, never from when the receiver happened to look, so with a virtual clock the
//! arrival times are exact too. [`FaultStats`] counts each fault injected.

use std::collections::VecDeque;
use std::fmt;

use super::crc32::{fcs, FCS_LEN};
use crate::buf::PacketBuf;
use crate::probe::{Counter, Counters};
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use crate::wire::ethernet;

/// What the wire into a NIC does to frames. The default does nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Seeds the draws: the same seed, the same faults.
    pub seed: u64,
    /// Probability of dropping a frame.
    pub drop: f64,
    /// Probability of delivering a frame twice.
    pub duplicate: f64,
    /// Probability of holding a frame back and delivering it after the next one (or the
    /// next `reorder_depth`).
    pub reorder: f64,
    /// How many frames a held frame lets pass (1: it swaps with the next; more is the
    /// deeper reordering of parallel paths, which starts fast retransmits).
    pub reorder_depth: u32,
    /// The longest a held frame waits for a next one.
    pub reorder_hold: Duration,
    /// Fixed one-way latency.
    pub latency: Duration,
    /// Uniform extra latency, from zero to this.
    pub jitter: Duration,
    /// Probability of flipping bits after the FCS (the receiver drops the frame).
    pub flip_caught: f64,
    /// Probability of flipping bits and recomputing the FCS (the frame arrives corrupted).
    pub flip_passed: f64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig::none()
    }
}

impl FaultConfig {
    /// A perfect wire.
    pub const fn none() -> FaultConfig {
        FaultConfig {
            seed: 0,
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_hold: Duration::from_millis(1),
            reorder_depth: 1,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            flip_caught: 0.0,
            flip_passed: 0.0,
        }
    }

    /// A perfect wire whose faults, once set, are drawn from `seed`.
    pub const fn seeded(seed: u64) -> FaultConfig {
        FaultConfig {
            seed,
            ..FaultConfig::none()
        }
    }

    /// The lossy wire the transfer tests and `probestack soak` use: 1% of frames
    /// dropped, 1% duplicated and 1% reordered (held 200 µs), every frame 50 µs late with
    /// up to 20 µs of jitter; nothing corrupted.
    pub const fn lossy(seed: u64) -> FaultConfig {
        FaultConfig {
            seed,
            drop: 0.01,
            duplicate: 0.01,
            reorder: 0.01,
            reorder_hold: Duration::from_micros(200),
            latency: Duration::from_micros(50),
            jitter: Duration::from_micros(20),
            ..FaultConfig::none()
        }
    }

    /// Whether the wire does anything at all.
    pub fn is_none(&self) -> bool {
        self.drop <= 0.0
            && self.duplicate <= 0.0
            && self.reorder <= 0.0
            && self.flip_caught <= 0.0
            && self.flip_passed <= 0.0
            && self.latency == Duration::ZERO
            && self.jitter == Duration::ZERO
    }

    /// Checks that every probability is a number from 0 to 1.
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        for (name, p) in [
            ("drop", self.drop),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("flip_caught", self.flip_caught),
            ("flip_passed", self.flip_passed),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(FaultConfigError::Probability { name, value: p });
            }
        }
        Ok(())
    }
}

/// A fault configuration that cannot be used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultConfigError {
    /// A probability that is not from 0 to 1 (or is NaN).
    Probability { name: &'static str, value: f64 },
}

impl fmt::Display for FaultConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FaultConfigError::Probability { name, value } => {
                write!(f, "fault probability {name} = {value} is not within 0..=1")
            }
        }
    }
}

impl std::error::Error for FaultConfigError {}

/// Faults a wire injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that entered the wire (before drops and duplicates).
    pub frames: u64,
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames delivered after the frame sent behind them.
    pub reordered: u64,
    /// Held frames that no next frame came for in time and went on alone.
    pub reorder_expired: u64,
    /// Frames given a nonzero latency.
    pub delayed: u64,
    /// Frames with bits flipped after the FCS (dropped by the receiver as bad FCS).
    pub flipped_caught: u64,
    /// Frames with bits flipped and the FCS recomputed (delivered corrupted).
    pub flipped_passed: u64,
}

/// A frame on its way, with the FCS at its end.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub frame: PacketBuf,
    /// When it reaches the receiving NIC.
    pub deliver_at: Instant,
}

#[derive(Debug)]
struct Held {
    frame: PacketBuf,
    /// Frames delivered since it was held.
    passed: u32,
    /// When the hold ends if no next frame comes.
    expires: Instant,
}

/// One direction of the wire: the faults, the reorder hold and the frames in flight.
#[derive(Debug)]
pub(crate) struct Wire {
    cfg: FaultConfig,
    /// `cfg.is_none()`, once: a perfect wire draws nothing and delays nothing.
    perfect: bool,
    rng: Rng,
    held: Option<Held>,
    in_flight: VecDeque<InFlight>,
    /// The arrival time of the last frame put in flight (arrivals never go backwards).
    last_deliver: Instant,
    stats: FaultStats,
}

impl Wire {
    pub fn new(cfg: FaultConfig) -> Wire {
        Wire {
            cfg,
            perfect: cfg.is_none(),
            rng: Rng::new(cfg.seed),
            held: None,
            in_flight: VecDeque::new(),
            last_deliver: Instant::ZERO,
            stats: FaultStats::default(),
        }
    }

    /// Whether the wire does nothing to frames (no faults configured).
    pub fn is_perfect(&self) -> bool {
        self.perfect
    }

    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Puts a frame (with its FCS) sent at `sent_at` on the wire. Returns it if the wire
    /// dropped it, so the caller can reuse the memory.
    pub fn inject(
        &mut self,
        frame: PacketBuf,
        sent_at: Instant,
        counters: &Counters,
    ) -> Option<PacketBuf> {
        self.stats.frames += 1;
        // A hold that ended before this frame was sent ended without it.
        self.expire_hold(sent_at, counters);
        if self.perfect {
            self.deliver(frame, sent_at, counters);
            return None;
        }
        if self.rng.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            counters.inc(Counter::DriverFaultDrop);
            return Some(frame);
        }
        let copy = if self.rng.chance(self.cfg.duplicate) {
            match copy_frame(&frame) {
                Some(c) => {
                    self.stats.duplicated += 1;
                    counters.inc(Counter::DriverFaultDuplicate);
                    Some(c)
                }
                None => None,
            }
        } else {
            None
        };
        self.after_drop(frame, sent_at, counters);
        if let Some(c) = copy {
            self.after_drop(c, sent_at, counters);
        }
        None
    }

    /// The frame sent at `sent_at` straight through, when the wire is perfect and has
    /// nothing on it: its arrival time, counted as [`inject`](Self::inject) would count
    /// it, if that is by `now`, so the caller hands it to the MAC at once instead of
    /// queueing it here to pop it again. `None` (and nothing counted) otherwise: the
    /// frame goes through `inject`.
    #[inline]
    pub fn pass_through(&mut self, sent_at: Instant, now: Instant) -> Option<Instant> {
        if !self.perfect || !self.in_flight.is_empty() || self.held.is_some() {
            return None;
        }
        // What `deliver` computes with no latency: arrivals never go backwards.
        let deliver_at = sent_at.max(self.last_deliver);
        if deliver_at > now {
            return None;
        }
        self.stats.frames += 1;
        self.last_deliver = deliver_at;
        Some(deliver_at)
    }

    /// Ends a reorder hold whose time is up at `now`.
    pub fn expire_hold(&mut self, now: Instant, counters: &Counters) {
        if let Some(h) = &self.held {
            if now >= h.expires {
                let expires = h.expires;
                if let Some(h) = self.held.take() {
                    self.stats.reorder_expired += 1;
                    self.deliver(h.frame, expires, counters);
                }
            }
        }
    }

    /// Steps 3 to 6 for one frame (or copy).
    fn after_drop(&mut self, mut frame: PacketBuf, sent_at: Instant, counters: &Counters) {
        if self.rng.chance(self.cfg.flip_caught) {
            if flip_bits(&mut self.rng, frame.data_mut(), 0) {
                self.stats.flipped_caught += 1;
                counters.inc(Counter::DriverFaultFlipCaught);
            }
        } else if self.rng.chance(self.cfg.flip_passed) {
            let data = frame.data_mut();
            let body = data.len().saturating_sub(FCS_LEN);
            // After the Ethernet header when there is something after it: a router rebuilds
            // the link header at each hop; the datagram is what sits in its memory.
            let from = if body > ethernet::HEADER_LEN {
                ethernet::HEADER_LEN
            } else {
                0
            };
            if let Some((payload, trailer)) = data.split_at_mut_checked(body) {
                if flip_one_bit(&mut self.rng, payload, from) {
                    trailer.copy_from_slice(&fcs(payload));
                    self.stats.flipped_passed += 1;
                    counters.inc(Counter::DriverFaultFlipPassed);
                }
            }
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.held = Some(Held {
                frame,
                passed: 0,
                expires: sent_at + self.cfg.reorder_hold,
            });
            return;
        }
        self.deliver(frame, sent_at, counters);
        let Some(h) = self.held.as_mut() else {
            return;
        };
        h.passed += 1;
        if h.passed >= self.cfg.reorder_depth {
            if let Some(h) = self.held.take() {
                self.stats.reordered += 1;
                counters.inc(Counter::DriverFaultReorder);
                self.deliver(h.frame, sent_at, counters);
            }
        }
    }

    /// Step 6: latency and jitter, then in flight.
    fn deliver(&mut self, frame: PacketBuf, from: Instant, counters: &Counters) {
        let mut delay = self.cfg.latency;
        if self.cfg.jitter > Duration::ZERO {
            let j = self.rng.below(self.cfg.jitter.as_nanos().saturating_add(1));
            delay = delay + Duration::from_nanos(j);
        }
        if delay > Duration::ZERO {
            self.stats.delayed += 1;
            counters.inc(Counter::DriverFaultDelay);
        }
        let deliver_at = (from + delay).max(self.last_deliver);
        self.last_deliver = deliver_at;
        self.in_flight.push_back(InFlight { frame, deliver_at });
    }

    /// The next frame whose arrival time has come by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<InFlight> {
        if self.in_flight.front()?.deliver_at <= now {
            self.in_flight.pop_front()
        } else {
            None
        }
    }

    /// When the wire next has something to do: a frame arrives or a hold ends.
    pub fn next_deadline(&self) -> Option<Instant> {
        let arrival = self.in_flight.front().map(|f| f.deliver_at);
        let hold = self.held.as_ref().map(|h| h.expires);
        match (arrival, hold) {
            (Some(a), Some(h)) => Some(a.min(h)),
            (a, h) => a.or(h),
        }
    }

    /// Frames in flight or held.
    pub fn len(&self) -> usize {
        self.in_flight.len() + usize::from(self.held.is_some())
    }

    /// Whether no frame is in flight or held.
    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty() && self.held.is_none()
    }

    /// The least latency a frame can have: when a frame sent at `t` arrives at the earliest.
    pub fn min_latency(&self) -> Duration {
        self.cfg.latency
    }
}

/// A copy of a frame in a new buffer of the same layout, or `None` if memory ran out.
fn copy_frame(frame: &PacketBuf) -> Option<PacketBuf> {
    let mut c = PacketBuf::new(frame.len(), frame.headroom(), frame.tailroom()).ok()?;
    c.data_mut().copy_from_slice(frame.data());
    Some(c)
}

/// Flips one bit of `bytes[from..]`. False if there are no bits there.
fn flip_one_bit(rng: &mut Rng, bytes: &mut [u8], from: usize) -> bool {
    let Some(region) = bytes.get_mut(from..) else {
        return false;
    };
    let bits = (region.len() as u64).saturating_mul(8);
    if bits == 0 {
        return false;
    }
    flip(region, rng.below(bits));
    true
}

/// Flips one or two distinct bits of `bytes[from..]`. False if there are no bits there.
fn flip_bits(rng: &mut Rng, bytes: &mut [u8], from: usize) -> bool {
    let Some(region) = bytes.get_mut(from..) else {
        return false;
    };
    let bits = (region.len() as u64).saturating_mul(8);
    if bits == 0 {
        return false;
    }
    let first = rng.below(bits);
    flip(region, first);
    if bits > 1 && rng.chance(0.5) {
        // A second bit, distinct from the first (two flips of one bit would undo it).
        let second = (first + 1 + rng.below(bits - 1)) % bits;
        flip(region, second);
    }
    true
}

fn flip(bytes: &mut [u8], bit: u64) {
    if let Some(b) = bytes.get_mut((bit / 8) as usize) {
        *b ^= 1 << (bit % 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::crc32::check_fcs;

    fn frame(seq: u32, len: usize) -> PacketBuf {
        let mut b = PacketBuf::new(len, 16, FCS_LEN).unwrap();
        b.data_mut()[..4].copy_from_slice(&seq.to_be_bytes());
        for (i, x) in b.data_mut()[4..].iter_mut().enumerate() {
            *x = i as u8;
        }
        let sum = fcs(b.data());
        b.extend_from_slice(&sum).unwrap();
        b
    }

    fn seq(f: &PacketBuf) -> u32 {
        u32::from_be_bytes([f.data()[0], f.data()[1], f.data()[2], f.data()[3]])
    }

    /// Sends `n` frames 1 µs apart and collects what arrives by the end of time.
    fn run(cfg: FaultConfig, n: u32) -> (Vec<(u32, bool, Instant)>, FaultStats) {
        let counters = Counters::new();
        let mut w = Wire::new(cfg);
        let mut out = Vec::new();
        for i in 0..n {
            let t = Instant::from_micros(i as u64);
            let _ = w.inject(frame(i, 64), t, &counters);
            while let Some(f) = w.pop_due(t) {
                out.push((seq(&f.frame), check_fcs(f.frame.data()), f.deliver_at));
            }
        }
        let end = Instant::from_millis(1_000_000);
        w.expire_hold(end, &counters);
        while let Some(f) = w.pop_due(end) {
            out.push((seq(&f.frame), check_fcs(f.frame.data()), f.deliver_at));
        }
        assert_eq!(w.len(), 0);
        let s = w.stats();
        assert_eq!(counters.get(Counter::DriverFaultDrop), s.dropped);
        assert_eq!(counters.get(Counter::DriverFaultDuplicate), s.duplicated);
        assert_eq!(counters.get(Counter::DriverFaultReorder), s.reordered);
        assert_eq!(
            counters.get(Counter::DriverFaultFlipCaught),
            s.flipped_caught
        );
        assert_eq!(
            counters.get(Counter::DriverFaultFlipPassed),
            s.flipped_passed
        );
        assert_eq!(counters.get(Counter::DriverFaultDelay), s.delayed);
        (out, s)
    }

    /// `count` within `sigmas` standard deviations of Binomial(n, p).
    fn near(count: u64, n: u64, p: f64, sigmas: f64) -> bool {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (count as f64 - mean).abs() <= sigmas * sd + 1.0
    }

    #[test]
    fn a_perfect_wire_delivers_everything_at_once_in_order() {
        let (out, s) = run(FaultConfig::none(), 1000);
        assert_eq!(out.len(), 1000);
        for (i, &(q, ok, at)) in out.iter().enumerate() {
            assert_eq!(
                (q, ok, at),
                (i as u32, true, Instant::from_micros(i as u64))
            );
        }
        assert_eq!(
            s,
            FaultStats {
                frames: 1000,
                ..FaultStats::default()
            }
        );
    }

    #[test]
    fn drops_near_their_probability_and_deterministic() {
        let cfg = FaultConfig {
            drop: 0.1,
            ..FaultConfig::seeded(1)
        };
        let (out, s) = run(cfg, 20_000);
        assert!(near(s.dropped, 20_000, 0.1, 8.0), "{s:?}");
        assert_eq!(out.len() as u64, 20_000 - s.dropped);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
        let (out2, s2) = run(cfg, 20_000);
        assert_eq!((out, s), (out2, s2));
        let (_, s3) = run(FaultConfig { seed: 2, ..cfg }, 20_000);
        assert_ne!(s3, s2);
    }

    #[test]
    fn duplicates_follow_their_original() {
        let cfg = FaultConfig {
            duplicate: 0.05,
            ..FaultConfig::seeded(3)
        };
        let (out, s) = run(cfg, 20_000);
        assert!(near(s.duplicated, 20_000, 0.05, 8.0), "{s:?}");
        assert_eq!(out.len() as u64, 20_000 + s.duplicated);
        let dups = out.windows(2).filter(|w| w[0].0 == w[1].0).count() as u64;
        assert_eq!(dups, s.duplicated);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(out.iter().all(|f| f.1));
        assert_eq!(run(cfg, 20_000), (out, s));
    }

    #[test]
    fn reorders_swap_neighbours_near_their_probability() {
        let p = 0.1;
        let cfg = FaultConfig {
            reorder: p,
            ..FaultConfig::seeded(4)
        };
        let n = 20_000;
        let (out, s) = run(cfg, n);
        assert_eq!(out.len(), n as usize);
        // Each frame is held with probability p unless the one before it is held: a
        // fraction p / (1 + p) of frames is held.
        assert!(near(s.reordered, n as u64, p / (1.0 + p), 8.0), "{s:?}");
        assert_eq!(s.reorder_expired, 0);
        let inversions = out.windows(2).filter(|w| w[0].0 > w[1].0).count() as u64;
        assert_eq!(inversions, s.reordered);
        // Every frame arrives, each out of place by at most one.
        let mut seen: Vec<u32> = out.iter().map(|f| f.0).collect();
        for (i, &q) in seen.iter().enumerate() {
            assert!((q as i64 - i as i64).abs() <= 1);
        }
        seen.sort_unstable();
        assert!(seen.iter().enumerate().all(|(i, &q)| q == i as u32));
        assert_eq!(run(cfg, n), (out, s));
    }

    #[test]
    fn a_deeper_reorder_lets_that_many_frames_pass() {
        let cfg = FaultConfig {
            reorder: 0.05,
            reorder_depth: 4,
            ..FaultConfig::seeded(6)
        };
        let n = 20_000;
        let (out, s) = run(cfg, n);
        assert_eq!(out.len(), n as usize);
        assert!(s.reordered > 0 && s.reorder_expired == 0, "{s:?}");
        // Each held frame arrives four places late, the four it let pass one early each.
        let late = out
            .iter()
            .enumerate()
            .filter(|&(i, f)| f.0 as usize + 4 == i)
            .count() as u64;
        assert_eq!(late, s.reordered);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, f)| (f.0 as i64 - i as i64) <= 1 && (i as i64 - f.0 as i64) <= 4));
    }

    #[test]
    fn a_held_frame_with_no_successor_goes_on_alone_after_the_hold() {
        let cfg = FaultConfig {
            reorder: 1.0,
            reorder_hold: Duration::from_micros(50),
            ..FaultConfig::seeded(5)
        };
        let counters = Counters::new();
        let mut w = Wire::new(cfg);
        assert!(w.inject(frame(0, 64), Instant::ZERO, &counters).is_none());
        assert!(w.pop_due(Instant::from_micros(49)).is_none());
        assert_eq!(w.next_deadline(), Some(Instant::from_micros(50)));
        // A frame sent after the hold ended does not overtake the held one.
        assert!(w
            .inject(frame(1, 64), Instant::from_micros(60), &counters)
            .is_none());
        let a = w.pop_due(Instant::from_micros(60)).unwrap();
        assert_eq!((seq(&a.frame), a.deliver_at), (0, Instant::from_micros(50)));
        assert!(w.pop_due(Instant::from_micros(60)).is_none());
        // Frame 1 is held in turn (p = 1), then ends its hold by time.
        w.expire_hold(Instant::from_micros(110), &counters);
        let b = w.pop_due(Instant::from_micros(110)).unwrap();
        assert_eq!(seq(&b.frame), 1);
        assert_eq!(
            w.stats(),
            FaultStats {
                frames: 2,
                reorder_expired: 2,
                ..FaultStats::default()
            }
        );
    }

    #[test]
    fn delay_is_latency_plus_bounded_jitter_and_never_reorders() {
        let latency = Duration::from_micros(100);
        let jitter = Duration::from_micros(20);
        let cfg = FaultConfig {
            latency,
            jitter,
            ..FaultConfig::seeded(6)
        };
        // Frames 1 µs apart with 20 µs of jitter: arrival order is kept by holding some
        // frames back behind the one before.
        let (out, s) = run(cfg, 10_000);
        assert_eq!(s.delayed, 10_000);
        assert_eq!(out.len(), 10_000);
        assert!(out
            .windows(2)
            .all(|w| w[0].0 + 1 == w[1].0 && w[0].2 <= w[1].2));
        for &(q, _, at) in &out {
            let sent = Instant::from_micros(q as u64);
            let d = at - sent;
            assert!(d >= latency, "{q}: {d}");
        }
        // Sent far apart, no frame waits for another: the delay is exactly uniform
        // latency..=latency + jitter; its mean is near latency + jitter / 2.
        let counters = Counters::new();
        let mut w = Wire::new(cfg);
        let n = 10_000u64;
        let mut total = 0u64;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for i in 0..n {
            let t = Instant::from_millis(i);
            assert!(w.inject(frame(i as u32, 64), t, &counters).is_none());
            assert!(w
                .pop_due(t + Duration::from_nanos(latency.as_nanos() - 1))
                .is_none());
            let f = w.pop_due(t + latency + jitter).unwrap();
            let d = (f.deliver_at - t).as_nanos();
            total += d;
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(lo >= 100_000 && hi <= 120_000, "{lo} {hi}");
        let mean = total as f64 / n as f64;
        // Uniform over 20 µs: sd 5.8 µs, of the mean over 10000 draws 58 ns.
        assert!((mean - 110_000.0).abs() < 600.0, "{mean}");
        // Many distinct values, both ends nearly reached.
        assert!(lo < 100_500 && hi > 119_500, "{lo} {hi}");
    }

    #[test]
    fn caught_flips_break_the_fcs_and_passed_flips_keep_it() {
        let cfg = FaultConfig {
            flip_caught: 0.2,
            flip_passed: 0.25,
            ..FaultConfig::seeded(7)
        };
        let n = 20_000u32;
        let (out, s) = run(cfg, n);
        assert_eq!(out.len(), n as usize);
        assert!(near(s.flipped_caught, n as u64, 0.2, 8.0), "{s:?}");
        // Passed flips are drawn only for frames without a caught flip.
        assert!(near(s.flipped_passed, n as u64, 0.8 * 0.25, 8.0), "{s:?}");
        let bad = out.iter().filter(|f| !f.1).count() as u64;
        assert_eq!(bad, s.flipped_caught);
        assert_eq!(run(cfg, n), (out, s));
    }

    #[test]
    fn a_passed_flip_changes_the_payload_only() {
        let cfg = FaultConfig {
            flip_passed: 1.0,
            ..FaultConfig::seeded(8)
        };
        let counters = Counters::new();
        let mut w = Wire::new(cfg);
        for i in 0..500 {
            let original = frame(i, 100);
            let mut sent = PacketBuf::new(0, 16, 200).unwrap();
            sent.extend_from_slice(original.data()).unwrap();
            assert!(w.inject(sent, Instant::ZERO, &counters).is_none());
            let got = w.pop_due(Instant::ZERO).unwrap().frame;
            assert!(check_fcs(got.data()));
            let diff: Vec<usize> = (0..100)
                .filter(|&k| got.data()[k] != original.data()[k])
                .collect();
            assert!(!diff.is_empty() && diff.len() <= 2, "{diff:?}");
            assert!(diff.iter().all(|&k| k >= ethernet::HEADER_LEN));
            let bits: u32 = (0..100)
                .map(|k| (got.data()[k] ^ original.data()[k]).count_ones())
                .sum();
            assert!((1..=2).contains(&bits));
        }
        assert_eq!(w.stats().flipped_passed, 500);
    }

    #[test]
    fn tiny_frames_do_not_trip_the_wire() {
        let cfg = FaultConfig {
            flip_caught: 0.5,
            flip_passed: 1.0,
            duplicate: 0.5,
            ..FaultConfig::seeded(9)
        };
        let counters = Counters::new();
        let mut w = Wire::new(cfg);
        for len in 0..8 {
            let b = PacketBuf::new(len, 0, 0).unwrap();
            let _ = w.inject(b, Instant::ZERO, &counters);
        }
        let mut n = 0;
        while w.pop_due(Instant::ZERO).is_some() {
            n += 1;
        }
        assert!(n >= 8);
    }

    #[test]
    fn probabilities_are_validated() {
        assert!(FaultConfig::none().validate().is_ok());
        assert!(FaultConfig::none().is_none());
        let bad = FaultConfig {
            drop: 1.5,
            ..FaultConfig::none()
        };
        assert_eq!(
            bad.validate(),
            Err(FaultConfigError::Probability {
                name: "drop",
                value: 1.5
            })
        );
        let nan = FaultConfig {
            flip_passed: f64::NAN,
            ..FaultConfig::none()
        };
        assert!(nan.validate().is_err());
        assert!(nan
            .validate()
            .unwrap_err()
            .to_string()
            .contains("flip_passed"));
    }
}
